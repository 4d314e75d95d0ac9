package cli

import (
	"github.com/twicejobs/twice"
)

// kindBook is what a command knows about job kinds: this binary's
// registry first, then the catalog the workers publish to the store, so
// the stock binary describes a team's kinds as well as the team's own CLI.
type kindBook struct {
	reg *twice.Registry
	// showUnknown shows the args of kinds known nowhere (--show-args).
	showUnknown bool
}

// newKindBook is the book of this binary's registry alone.
func (c *cli) newKindBook(showUnknown bool) *kindBook {
	return &kindBook{reg: c.reg, showUnknown: showUnknown}
}

// sensitive lists kind's sensitive args fields and reports whether the
// kind's fields are known at all.
func (k *kindBook) sensitive(kind string) ([]string, bool) {
	if f, ok := k.reg.SensitiveFields(kind); ok {
		return f, true
	}
	return nil, false
}
