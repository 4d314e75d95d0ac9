package twicestore

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/twicejobs/twice/twicetype"
)

// CatalogArgField is an args field as the drivers store it in the kind
// catalog's args column: the published field and, for a sensitive one,
// when a publish last marked it so. Its JSON is a superset of
// twicetype.ArgField's, so the column reads back as []ArgField too.
type CatalogArgField struct {
	twicetype.ArgField
	// SensitiveAt is when a publish last marked the field sensitive, in
	// unix microseconds; zero for a field that is not sensitive.
	SensitiveAt int64 `json:"sensitive_at_us,omitempty"`
}

// MergeCatalogArgs is the args column of a kind published at now with
// fields next over the stored column prev ("" for a kind not catalogued
// yet): next's fields in next's order; each field a publish at or after
// keepSince marked sensitive still marked, with that publish's time; and
// after them such fields next does not list at all, because the jobs the
// nodes that marked them enqueue carry them. A zero keepSince keeps
// nothing of prev. Both drivers call it in CatalogPublish, with concurrent
// publishes held off until theirs commits, and store what it returns.
func MergeCatalogArgs(prev string, next []twicetype.ArgField, now, keepSince time.Time) (string, error) {
	kept := map[string]CatalogArgField{}
	var stored []CatalogArgField
	if prev != "" && !keepSince.IsZero() {
		if err := json.Unmarshal([]byte(prev), &stored); err != nil {
			return "", fmt.Errorf("read the stored args fields: %w", err)
		}
		for _, f := range stored {
			if f.Sensitive && f.SensitiveAt >= keepSince.UnixMicro() {
				kept[f.Name] = f
			}
		}
	}
	out := make([]CatalogArgField, 0, len(next))
	listed := make(map[string]bool, len(next))
	for _, f := range next {
		listed[f.Name] = true
		merged := CatalogArgField{ArgField: f}
		if f.Sensitive {
			merged.SensitiveAt = now.UnixMicro()
		} else if k, ok := kept[f.Name]; ok {
			merged.Sensitive, merged.SensitiveAt = true, k.SensitiveAt
		}
		out = append(out, merged)
	}
	for _, f := range stored {
		if _, ok := kept[f.Name]; ok && !listed[f.Name] {
			out = append(out, f)
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return "", fmt.Errorf("encode the args fields: %w", err)
	}
	return string(b), nil
}

// CatalogPublishParams carry the kinds one node handles.
type CatalogPublishParams struct {
	// Node is the publishing node's id, recorded as each kind's Node.
	Node string
	// Now is recorded as each kind's LastSeen; zero is the current time.
	Now time.Time
	// Kinds are the kinds to record; their Node and LastSeen are ignored.
	Kinds []twicetype.KindInfo
	// KeepSensitiveSince keeps the sensitive flags of recent publishes: an
	// args field that a publish at or after it marked sensitive stays
	// marked, and listed, whatever this publish says of it. During a
	// rolling deploy that tags a field sensitive, an old node's publish
	// then does not un-redact it. A kept flag keeps the time of the
	// publish that set it, so it lapses once no node has set it since.
	// Zero keeps none: this publish's flags stand.
	KeepSensitiveSince time.Time
}

// Validate refuses a publish the catalog cannot record faithfully; drivers
// call it first in CatalogPublish.
func (p *CatalogPublishParams) Validate() error {
	if p.Node == "" {
		return errors.New("publish kind catalog: the publishing node has no id")
	}
	seen := make(map[string]bool, len(p.Kinds))
	for _, k := range p.Kinds {
		switch {
		case k.Kind == "":
			return fmt.Errorf("publish kind catalog of node %q: a kind has no name", p.Node)
		case seen[k.Kind]:
			return fmt.Errorf("publish kind catalog of node %q: kind %q is listed twice", p.Node, k.Kind)
		}
		seen[k.Kind] = true
	}
	return nil
}

// CatalogListParams are empty; they keep the method's shape.
type CatalogListParams struct{}

// CatalogListResult holds the catalogued kinds, ordered by kind.
type CatalogListResult struct {
	Kinds []twicetype.KindInfo
}
