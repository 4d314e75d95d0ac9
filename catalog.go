package twice

import (
	"cmp"
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/twicejobs/twice/internal/logattr"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// The kind catalog is what workers tell the store about the kinds they
// handle, so that tools not compiled with those kinds (the stock CLI, the
// dashboard) can show, check and redact them: each node publishes its
// registry's kinds at Start and with every node heartbeat. Entries outlive
// their node; LastSeen says how fresh they are.

// CatalogKind is one kind as an operator tool sees it: the catalog's entry
// merged with this client's registry.
type CatalogKind struct {
	// KindInfo is the catalog's entry, or, for a kind this client registers
	// but no node published, what this client would publish.
	twicetype.KindInfo
	// Registered reports that this client's registry has the kind.
	Registered bool
	// Live reports that a node published the kind within the node liveness
	// window: a worker for it is running.
	Live bool
}

// catalogSensitiveKept is how long a sensitive flag that one node
// published outlives publishes of the kind that lack it (an older node's,
// during and after a rolling deploy that added the tag): the store keeps
// it while a publish at most this old set it.
const catalogSensitiveKept = time.Hour

// SensitiveFields lists the JSON names of the kind's args fields to
// redact wherever its args are shown: the fields its entry marks
// sensitive. Client.Catalog marks there every field this client's
// registry or a live or recent publisher marks (the store keeps a
// publisher's flag for an hour after its last publish), so a field is
// shown only when nobody says it is sensitive. The CLI and the dashboard
// both redact by it.
func (k CatalogKind) SensitiveFields() []string {
	var fields []string
	for _, f := range k.Args {
		if f.Sensitive {
			fields = append(fields, f.Name)
		}
	}
	return fields
}

// Catalog lists every kind the store's catalog holds, merged with the kinds
// this client registers, by kind. A kind in both keeps the catalog's entry,
// which describes the workers that run it, with the union of the
// sensitive fields: a field this client's args type tags sensitive is
// marked so (and listed, if the entry lacks it) whatever the last
// publisher said.
func (c *Client) Catalog(ctx context.Context) ([]CatalogKind, error) {
	res, err := c.store.CatalogList(ctx, &twicestore.CatalogListParams{})
	if err != nil {
		return nil, fmt.Errorf("twice: read the kind catalog: %w", err)
	}
	aliveSince := c.now().Add(-nodeAliveWindow)
	byKind := make(map[string]*CatalogKind, len(res.Kinds))
	for _, k := range res.Kinds {
		byKind[k.Kind] = &CatalogKind{KindInfo: k, Live: !k.LastSeen.Before(aliveSince)}
	}
	for _, k := range c.catalogKinds() {
		if e := byKind[k.Kind]; e != nil {
			e.Registered = true
			e.Args = withSensitive(e.Args, k.Args, c.registry.lookup(k.Kind).argsType)
			continue
		}
		k.Args = withSensitive(k.Args, k.Args, c.registry.lookup(k.Kind).argsType)
		byKind[k.Kind] = &CatalogKind{KindInfo: k, Registered: true}
	}
	out := make([]CatalogKind, 0, len(byKind))
	for _, k := range byKind {
		out = append(out, *k)
	}
	slices.SortFunc(out, func(a, b CatalogKind) int { return strings.Compare(a.Kind, b.Kind) })
	return out, nil
}

// withSensitive returns a copy of args with every field that the
// registered args type t tags sensitive marked so. A tagged field args
// lacks is added as ours (t's ArgFields) describe it, or as of any JSON
// type for a type that encodes itself (it has no ArgFields, but
// SensitiveFields still names its tagged fields).
func withSensitive(args, ours []ArgField, t reflect.Type) []ArgField {
	out := slices.Clone(args)
	for _, name := range SensitiveFields(t) {
		i := slices.IndexFunc(out, func(f ArgField) bool { return f.Name == name })
		if i >= 0 {
			out[i].Sensitive = true
			continue
		}
		f := ArgField{Name: name, Type: twicetype.ArgTypeAny, Sensitive: true}
		if j := slices.IndexFunc(ours, func(f ArgField) bool { return f.Name == name }); j >= 0 {
			f = ours[j]
		}
		out = append(out, f)
	}
	return out
}

// publishCatalog records this node's kinds in the store's catalog. A
// client with no kinds publishes nothing: it runs no worker for any.
func (c *Client) publishCatalog(ctx context.Context) error {
	kinds := c.catalogKinds()
	if len(kinds) == 0 {
		return nil
	}
	now := c.now()
	return c.store.CatalogPublish(ctx, &twicestore.CatalogPublishParams{Node: c.cfg.NodeID, Now: now, Kinds: kinds,
		KeepSensitiveSince: now.Add(-catalogSensitiveKept)})
}

// catalogKinds describes the registered kinds as this client runs them:
// options resolved against the client's defaults, the args' JSON fields,
// the schedules that enqueue each kind, and its compiled limits (an
// override is the store's, not the node's).
func (c *Client) catalogKinds() []twicetype.KindInfo {
	kinds := c.registry.Kinds()
	if len(kinds) == 0 {
		return nil
	}
	schedules := map[string][]twicetype.KindSchedule{}
	for _, s := range c.registry.scheduleList() {
		schedules[s.kind] = append(schedules[s.kind], twicetype.KindSchedule{Name: s.name, Spec: s.spec})
	}
	out := make([]twicetype.KindInfo, 0, len(kinds))
	for _, kind := range kinds {
		e := c.registry.lookup(kind)
		out = append(out, twicetype.KindInfo{
			Kind:        kind,
			HandlerName: e.opts.HandlerName,
			Queue:       c.queueFor(kind, ""),
			Strategy:    e.opts.Strategy.String(),
			FailClosed:  e.opts.FailClosed,
			MaxAttempts: cmp.Or(e.opts.MaxAttempts, c.cfg.MaxAttempts),
			Timeout:     e.opts.Timeout,
			Args:        ArgFields(e.argsType),
			Schedules:   schedules[kind],
			Limit:       e.opts.storeLimit(),
		})
	}
	return out
}

// warnUnservedQueues logs each registered kind whose jobs go to a queue
// the config does not work: unless another worker serves that queue, the
// kind's jobs wait forever. It runs at NewClient, on the validated config.
func warnUnservedQueues(cfg Config) {
	served := make([]string, len(cfg.Queues))
	for i, q := range cfg.Queues {
		served[i] = q.Name
	}
	for _, kind := range cfg.Registry.Kinds() {
		q := cmp.Or(cfg.Registry.lookup(kind).opts.Queue, cfg.DefaultQueue)
		if !slices.Contains(served, q) {
			cfg.Logger.Warn("a registered kind's queue is not among the queues this client works: its jobs wait unless another worker serves that queue; add it to Config.Queues",
				logattr.Component, "client", logattr.Kind, kind, logattr.Queue, q, "queues", served)
		}
	}
}
