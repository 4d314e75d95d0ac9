package cli

import (
	"context"
	"slices"
	"strings"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/toggles"
)

// kindBook is what a command knows about job kinds: this binary's
// registry, and the catalog the workers publish to the store, so the stock
// binary describes a team's kinds as well as the team's own CLI does.
type kindBook struct {
	reg *twice.Registry
	// cat holds the catalog merged with the registry, by kind.
	cat map[string]twice.CatalogKind
	// showUnknown shows the args of kinds known nowhere (--show-args).
	showUnknown bool
	// paused holds the queues paused now, whose waiting jobs are shown as
	// paused rather than stuck.
	paused map[string]bool
	// why holds why the listed jobs that wait do (loadWhy), by id.
	why map[int64]*twice.WaitReason
}

// loadKindBook reads the catalog and the queues' pauses through client.
func (c *cli) loadKindBook(ctx context.Context, client *twice.Client, showUnknown bool) (*kindBook, error) {
	kinds, err := client.Catalog(ctx)
	if err != nil {
		return nil, err
	}
	b := &kindBook{reg: c.reg, cat: make(map[string]twice.CatalogKind, len(kinds)), showUnknown: showUnknown, paused: map[string]bool{}}
	for _, k := range kinds {
		b.cat[k.Kind] = k
	}
	queues, err := client.QueueList(ctx)
	if err != nil {
		return nil, err
	}
	for _, q := range queues {
		if q.Paused {
			b.paused[q.Name] = true
		}
	}
	return b, nil
}

// sensitive lists kind's sensitive args fields and reports whether the
// kind's fields are known at all: twice.CatalogKind.SensitiveFields, the
// rule the dashboard redacts by too (this binary's type or any live or
// recent publisher says so).
func (k *kindBook) sensitive(kind string) ([]string, bool) {
	e, ok := k.cat[kind]
	if !ok {
		return nil, false
	}
	return e.SensitiveFields(), true
}

// lookup returns kind's catalog entry (the registry's when no worker
// published it).
func (k *kindBook) lookup(kind string) (twice.CatalogKind, bool) {
	e, ok := k.cat[kind]
	return e, ok
}

// kinds lists every known kind, sorted.
func (k *kindBook) kinds() []string {
	out := make([]string, 0, len(k.cat))
	for name := range k.cat {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// queues lists the queues the known kinds go to, sorted, each once.
func (k *kindBook) queues() []string {
	var out []string
	for _, e := range k.cat {
		if e.Queue != "" && !slices.Contains(out, e.Queue) {
			out = append(out, e.Queue)
		}
	}
	slices.Sort(out)
	return out
}

// suggest is the known kind closest to kind, if one is close enough to
// be a typo, as "; did you mean X?", else "".
func (k *kindBook) suggest(kind string) string {
	return didYouMean(kind, k.kinds())
}

// didYouMean is "; did you mean X?" for the candidate closest to s, if one
// is close enough to be a typo, else "".
func didYouMean(s string, candidates []string) string {
	if u := toggles.Unknown([]string{strings.ToLower(s)}, candidates); len(u) == 1 && u[0].Suggestion != "" {
		return "; did you mean " + u[0].Suggestion + "?"
	}
	return ""
}
