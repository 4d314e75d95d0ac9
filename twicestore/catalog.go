package twicestore

import (
	"errors"
	"fmt"
	"time"

	"github.com/twicejobs/twice/twicetype"
)

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
