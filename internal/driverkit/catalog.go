package driverkit

import (
	"encoding/json"
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
