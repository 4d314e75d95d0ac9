package twice

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twicejobs/twice/internal/logattr"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// The drift guard: a deploy that changes a kind's args without bumping its
// version must not strand the jobs already waiting, because a handler
// decodes its args strictly and a job whose args no longer decode fails
// for good. Start compares each registered kind's args with what the
// stored jobs that will still run carry and with what live workers of the
// kind publish, and refuses an incompatible change.

// ArgsScanLimit is how many stored jobs of one kind CheckArgs reads at
// most (the newest first): beyond it, older jobs are not looked at, so
// the check stays bounded on a backlog of millions. KindArgs.ScanCapped
// says when it was reached.
const ArgsScanLimit = 100_000

// argsScanPage is how many jobs one read of the scan fetches.
const argsScanPage = 1000

// argsCheckTimeout bounds the check at Start when Start's context has no
// shorter deadline: a slow scan must not hold a deploy for long.
const argsCheckTimeout = 30 * time.Second

// argsScanStates are the states of the jobs that will still be decoded:
// waiting to run now or later (scheduled, retrying), parked on a wait,
// and running (a running job that fails is retried by whichever worker
// then runs).
var argsScanStates = []twicetype.JobState{twicetype.JobStateAvailable, twicetype.JobStateWaiting, twicetype.JobStateRunning}

// ErrArgsIncompatible is what Start and ArgsReport.Err return, wrapped,
// when a registered kind's args cannot decode the jobs that wait, or what
// a live worker of the kind enqueues.
var ErrArgsIncompatible = errors.New("args changed incompatibly")

// ArgsVerdict is what CheckArgs concluded of one kind.
type ArgsVerdict string

// The verdicts of CheckArgs.
const (
	// ArgsNew: no catalog entry and no stored job to compare with.
	ArgsNew ArgsVerdict = "new"
	// ArgsUnchanged: the args match the catalog and every stored job.
	ArgsUnchanged ArgsVerdict = "unchanged"
	// ArgsCompatible: the args changed, but every stored job still decodes
	// and no live worker publishes a field they lack.
	ArgsCompatible ArgsVerdict = "compatible"
	// ArgsIncompatible: stored jobs or a live worker carry a field the
	// args lack, or with a JSON type they refuse.
	ArgsIncompatible ArgsVerdict = "incompatible"
	// ArgsAllowed: incompatible, but KindOpts.ArgsChangeAllowed says the
	// change is deliberate.
	ArgsAllowed ArgsVerdict = "allowed"
	// ArgsUnchecked: the args type encodes or decodes itself, so its Go
	// fields need not be its JSON keys and nothing can be compared.
	ArgsUnchecked ArgsVerdict = "unchecked"
)

// ArgsChange is one difference between a kind's registered args and what
// was there before.
type ArgsChange struct {
	// Field is the args field's JSON name.
	Field string `json:"field"`
	// Change is "removed" (stored jobs or the catalog have the field, the
	// args lack it: removed or renamed), "type" (its JSON type differs),
	// "added" (the args have a field the catalog lacks) or "sensitive"
	// (its sensitive flag differs from the catalog's).
	Change string `json:"change"`
	// Was is the field's JSON type as the stored jobs carry it or the
	// catalog has it; Now as the registered args have it.
	Was string `json:"was,omitempty"`
	Now string `json:"now,omitempty"`
	// Jobs counts the scanned jobs that carry the field (removed) or carry
	// it with a type the args refuse (type).
	Jobs int `json:"jobs"`
	// LiveNode is the live worker (another node, heartbeat within the
	// liveness window) whose catalog entry has the field as Was says.
	LiveNode string `json:"live_node,omitempty"`
	// Binary is the worker binary checked against (CheckArgsAgainst's
	// schema's Binary) whose args have the field as Was says: the build
	// deployed now, whose jobs may carry it.
	Binary string `json:"binary,omitempty"`
	// Compatible reports that no job fails and no live worker disagrees:
	// Jobs is 0 and LiveNode and Binary empty, or the change is an
	// addition or a sensitive flag.
	Compatible bool `json:"compatible"`
}

// KindArgs is what CheckArgs found for one registered kind.
type KindArgs struct {
	Kind    string       `json:"kind"`
	Verdict ArgsVerdict  `json:"verdict"`
	Changes []ArgsChange `json:"changes,omitempty"`
	// JobsScanned counts the stored jobs read: available (due, scheduled
	// or retrying), waiting (parked) and running.
	JobsScanned int `json:"jobs_scanned"`
	// ScanCapped reports that the kind has more such jobs than
	// ArgsScanLimit; the oldest were not read.
	ScanCapped bool `json:"scan_capped,omitempty"`
	// AllowedReason is the kind's KindOpts.ArgsChangeAllowed.
	AllowedReason string `json:"allowed_reason,omitempty"`
}

// ArgsReport is the outcome of CheckArgs, one entry per checked kind,
// ordered by kind.
type ArgsReport struct {
	Kinds []KindArgs `json:"kinds"`
}

// Err returns nil unless a kind's args changed incompatibly without
// KindOpts.ArgsChangeAllowed; then an error wrapping ErrArgsIncompatible
// that names each kind, field and job count, and what to do.
func (r *ArgsReport) Err() error {
	var msgs []string
	for _, k := range r.Kinds {
		if k.Verdict != ArgsIncompatible {
			continue
		}
		var fields []string
		for _, ch := range k.Changes {
			if !ch.Compatible {
				fields = append(fields, ch.describe())
			}
		}
		msgs = append(msgs, fmt.Sprintf("kind %q: %s: twice decodes args strictly, so those jobs would fail; "+
			"keep the old fields and register the new args as %q (run both until %s drains), "+
			"or set KindOpts.ArgsChangeAllowed with the reason if the change is deliberate",
			k.Kind, strings.Join(fields, "; "), nextVersion(k.Kind), k.Kind))
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrArgsIncompatible, strings.Join(msgs, "; "))
}

// describe says what one change is and who carries the old shape.
func (ch ArgsChange) describe() string {
	var s string
	switch ch.Change {
	case "removed":
		s = fmt.Sprintf("field %q was removed or renamed", ch.Field)
	case "type":
		s = fmt.Sprintf("field %q changed type from %s to %s", ch.Field, ch.Was, ch.Now)
	case "added":
		s = fmt.Sprintf("field %q was added (%s)", ch.Field, ch.Now)
	case "sensitive":
		s = fmt.Sprintf("field %q is no longer sensitive", ch.Field)
		if ch.Now == "sensitive" {
			s = fmt.Sprintf("field %q is now sensitive", ch.Field)
		}
	default:
		s = fmt.Sprintf("field %q changed (%s)", ch.Field, ch.Change)
	}
	var who []string
	if ch.Jobs > 0 {
		who = append(who, fmt.Sprintf("%d waiting %s", ch.Jobs, plural(ch.Jobs, "job carries it", "jobs carry it")))
	}
	if ch.LiveNode != "" {
		who = append(who, fmt.Sprintf("live worker %q publishes it", ch.LiveNode))
	}
	if ch.Binary != "" {
		who = append(who, fmt.Sprintf("binary %s has it", ch.Binary))
	}
	if len(who) > 0 {
		s += ", but " + strings.Join(who, " and ")
	}
	return s
}

// Summary describes the kind's changes in one line, for logs and the CLI.
func (k KindArgs) Summary() string {
	parts := make([]string, len(k.Changes))
	for i, ch := range k.Changes {
		parts[i] = ch.describe()
	}
	return strings.Join(parts, "; ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// nextVersion names the kind's next version: "x.y.v1" gives "x.y.v2".
func nextVersion(kind string) string {
	i := strings.LastIndex(kind, ".v")
	if i < 0 {
		return kind + ".v2"
	}
	n, err := strconv.Atoi(kind[i+2:])
	if err != nil {
		return kind + ".v2"
	}
	return kind[:i] + ".v" + strconv.Itoa(n+1)
}

// CheckArgs compares the args of the registered kinds (all of them, or
// those named) with what was there before, as Start does before it works
// any job:
//
//   - the stored jobs of the kind that will still be decoded (available:
//     due, scheduled or retrying; waiting: parked; running), the newest
//     ArgsScanLimit of them: a key the args do not declare (a removed or
//     renamed field) or a value of a JSON type the field refuses makes
//     them fail, and is incompatible;
//   - the kind's catalog entry: when its publisher is another node whose
//     heartbeat is recent (it published within the liveness window and has
//     not stopped cleanly since), a field the entry has and the args lack, or
//     with another type, is incompatible too (that worker may still
//     enqueue it). Fields the args add, sensitive flags that changed, and
//     differences with a stale entry (or this node's own last publish) are
//     compatible, reported for the log. With no entry, a field no scanned
//     job carries is reported as added.
//
// A field made required cannot happen: twice has no required args
// fields, and a job without a field decodes it as its zero value. A
// number field (float) reads integers, and a field of any JSON type
// reads every type; other type changes are incompatible.
//
// A kind named that this client does not register is refused with an
// error wrapping ErrInvalidInput. Errors reading the store are returned as
// they are; an incompatible change is not an error of CheckArgs but a
// verdict: see ArgsReport.Err.
func (c *Client) CheckArgs(ctx context.Context, kinds ...string) (*ArgsReport, error) {
	if len(kinds) == 0 {
		kinds = c.registry.Kinds()
	}
	entries := make([]*kindEntry, 0, len(kinds))
	for _, kind := range kinds {
		e := c.registry.lookup(kind)
		if e == nil {
			return nil, errUnknownKind("check args of kind %q: this binary does not register it (it registers %s)",
				kind, strings.Join(c.registry.Kinds(), ", "))
		}
		entries = append(entries, e)
	}
	rep := &ArgsReport{Kinds: []KindArgs{}}
	if len(entries) == 0 {
		return rep, nil
	}
	cat, err := c.store.CatalogList(ctx, &twicestore.CatalogListParams{})
	if err != nil {
		return nil, fmt.Errorf("twice: check args: read the kind catalog: %w", err)
	}
	published := make(map[string]*twicetype.KindInfo, len(cat.Kinds))
	for i := range cat.Kinds {
		published[cat.Kinds[i].Kind] = &cat.Kinds[i]
	}
	live, err := c.liveArgsPublishers(ctx, entries, published)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		k, err := c.checkKindArgs(ctx, e, published[e.kind], live)
		if err != nil {
			return nil, err
		}
		rep.Kinds = append(rep.Kinds, k)
	}
	return rep, nil
}

// liveArgsPublishers returns the nodes other than this one whose catalog
// entries for the checked kinds come from a live worker: published within
// the liveness window by a node whose heartbeat is recent. The node list
// is read only when such an entry exists, and rules out a node that
// stopped cleanly a moment ago (a restart), which left the node list.
func (c *Client) liveArgsPublishers(ctx context.Context, entries []*kindEntry, published map[string]*twicetype.KindInfo) (map[string]bool, error) {
	aliveSince := c.now().Add(-nodeAliveWindow)
	recent := false
	for _, e := range entries {
		if p := published[e.kind]; p != nil && p.Node != c.cfg.NodeID && !p.LastSeen.Before(aliveSince) {
			recent = true
		}
	}
	if !recent {
		return nil, nil
	}
	nodes, err := c.store.NodeList(ctx, &twicestore.NodeListParams{AliveSince: aliveSince})
	if err != nil {
		return nil, fmt.Errorf("twice: check args: list the live nodes: %w", err)
	}
	live := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		if n.ID != c.cfg.NodeID {
			live[n.ID] = true
		}
	}
	return live, nil
}

// argsDiff collects one kind's changes by field and change, in the order
// found.
type argsDiff struct {
	changes []ArgsChange
	at      map[[2]string]int
}

func (d *argsDiff) get(field, change string) *ArgsChange {
	key := [2]string{field, change}
	if i, ok := d.at[key]; ok {
		return &d.changes[i]
	}
	if d.at == nil {
		d.at = map[[2]string]int{}
	}
	d.at[key] = len(d.changes)
	d.changes = append(d.changes, ArgsChange{Field: field, Change: change})
	return &d.changes[len(d.changes)-1]
}

// compare records in d how the args ours differ from prev, the fields
// as they were: a field prev has and ours lacks (removed), of a type ours
// cannot read (type), with another sensitive flag, or one ours adds.
// who marks the removed and type changes with whoever carries the old
// shape.
func (d *argsDiff) compare(ours, prev []ArgField, who func(*ArgsChange)) {
	for _, f := range prev {
		g := findField(ours, f.Name)
		switch {
		case g == nil:
			ch := d.get(f.Name, "removed")
			ch.Was = f.Type
			who(ch)
		case !typeReads(f.Type, g.Type):
			ch := d.get(g.Name, "type")
			ch.Was, ch.Now = f.Type, g.Type
			who(ch)
		case f.Sensitive != g.Sensitive:
			ch := d.get(g.Name, "sensitive")
			ch.Now = map[bool]string{true: "sensitive", false: "not sensitive"}[g.Sensitive]
		}
	}
	for _, g := range ours {
		if findField(prev, g.Name) == nil {
			d.get(g.Name, "added").Now = g.Type
		}
	}
}

// conclude sets k's changes from d and its verdict: incompatible when a
// removal or type change is carried by jobs, a live worker or the binary
// checked against; new when nothing was there to compare with.
func (k *KindArgs) conclude(d *argsDiff, nothingBefore bool) {
	k.Changes = d.changes
	incompatible := false
	for i := range k.Changes {
		ch := &k.Changes[i]
		ch.Compatible = ch.Change == "added" || ch.Change == "sensitive" || (ch.Jobs == 0 && ch.LiveNode == "" && ch.Binary == "")
		incompatible = incompatible || !ch.Compatible
	}
	switch {
	case incompatible && k.AllowedReason != "":
		k.Verdict = ArgsAllowed
	case incompatible:
		k.Verdict = ArgsIncompatible
	case len(k.Changes) > 0:
		k.Verdict = ArgsCompatible
	case nothingBefore:
		k.Verdict = ArgsNew
	default:
		k.Verdict = ArgsUnchanged
	}
}

// checkKindArgs compares one kind's args with its catalog entry (nil:
// none) and its stored jobs.
func (c *Client) checkKindArgs(ctx context.Context, e *kindEntry, pub *twicetype.KindInfo, liveNodes map[string]bool) (KindArgs, error) {
	k := KindArgs{Kind: e.kind, AllowedReason: e.opts.ArgsChangeAllowed}
	ours := ArgFields(e.argsType)
	if ours == nil || shapeOf(e.argsType).customDecode {
		k.Verdict = ArgsUnchecked
		return k, nil
	}
	var d argsDiff
	if pub != nil && pub.Args != nil {
		live := ""
		if liveNodes[pub.Node] && !pub.LastSeen.Before(c.now().Add(-nodeAliveWindow)) {
			live = pub.Node
		}
		d.compare(ours, pub.Args, func(ch *ArgsChange) { ch.LiveNode = live })
	}
	carried, err := c.scanKindArgs(ctx, &k, ours, &d)
	if err != nil {
		return k, err
	}
	if pub == nil && k.JobsScanned > 0 {
		// No catalog entry to say what was added: a field no stored job
		// carries is new (or always omitted, which reads the same).
		for _, g := range ours {
			if !carried[g.Name] {
				d.get(g.Name, "added").Now = g.Type
			}
		}
	}
	k.conclude(&d, pub == nil && k.JobsScanned == 0)
	return k, nil
}

// scanKindArgs reads the kind's stored jobs that will still be decoded,
// newest first, up to ArgsScanLimit, and counts in d the keys the args
// do not declare and the values of a type a field refuses. It returns
// the names of the fields some job carries.
func (c *Client) scanKindArgs(ctx context.Context, k *KindArgs, ours []ArgField, d *argsDiff) (carried map[string]bool, err error) {
	carried = map[string]bool{}
	for _, state := range argsScanStates {
		var before int64
		for {
			if k.JobsScanned >= ArgsScanLimit {
				k.ScanCapped = true
				return carried, nil
			}
			limit := min(argsScanPage, ArgsScanLimit-k.JobsScanned)
			res, err := c.store.JobList(ctx, &twicestore.JobListParams{
				Filter: twicestore.JobFilter{Kind: k.Kind, State: state}, BeforeID: before, Limit: limit})
			if err != nil {
				return nil, fmt.Errorf("twice: check args of kind %q: list %s jobs: %w", k.Kind, state, err)
			}
			for _, row := range res.Jobs {
				k.JobsScanned++
				before = row.ID
				members, err := objectMembers(row.Args)
				if err != nil {
					continue // not an object: it fails whatever the args are
				}
				for _, m := range members {
					g := findField(ours, m.key)
					if g == nil {
						ch := d.get(m.key, "removed")
						ch.Jobs++
						if ch.Was == "" {
							ch.Was = jsonTypeOfValue(m.value)
						}
						continue
					}
					carried[g.Name] = true
					if got, ok := jsonValueFits(m.value, g.Type); !ok {
						ch := d.get(g.Name, "type")
						ch.Jobs++
						ch.Now = g.Type
						if ch.Was == "" {
							ch.Was = got
						}
					}
				}
			}
			if len(res.Jobs) < limit {
				break
			}
		}
	}
	return carried, nil
}

// findField finds the field a JSON key decodes into, as encoding/json
// matches: exactly, else ignoring case.
func findField(fields []ArgField, name string) *ArgField {
	for i := range fields {
		if fields[i].Name == name {
			return &fields[i]
		}
	}
	for i := range fields {
		if strings.EqualFold(fields[i].Name, name) {
			return &fields[i]
		}
	}
	return nil
}

// typeReads reports whether a field of JSON type now reads the values a
// field of type was held: the same type, anything into a field of any
// type, an integer into a number; and, when was is unknown (any), yes,
// for the stored jobs then tell.
func typeReads(was, now string) bool {
	switch {
	case was == now, now == twicetype.ArgTypeAny, now == "", was == twicetype.ArgTypeAny, was == "":
		return true
	case was == twicetype.ArgTypeInteger && now == twicetype.ArgTypeNumber:
		return true
	}
	return false
}

// guardArgs runs CheckArgs at Start. An incompatible change refuses the
// start; one the kind allows is logged as a warning, a compatible one at
// info. A store error (a timed-out read, say) is logged as an error and
// the start goes on: a worker that cannot start because the check could
// not read is worse than one whose check was skipped, visibly.
func (c *Client) guardArgs(ctx context.Context) error {
	if len(c.registry.Kinds()) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, argsCheckTimeout)
	defer cancel()
	rep, err := c.CheckArgs(ctx)
	if err != nil {
		c.logger.ErrorContext(ctx, "checking the registered kinds' args against the catalog and the waiting jobs failed; starting without the check",
			logattr.Component, "client", logattr.Err, err)
		return nil
	}
	if err := rep.Err(); err != nil {
		return err
	}
	for _, k := range rep.Kinds {
		switch k.Verdict {
		case ArgsAllowed:
			c.logger.WarnContext(ctx, "args changed incompatibly; starting anyway as KindOpts.ArgsChangeAllowed says",
				logattr.Component, "client", logattr.Kind, k.Kind, "changes", k.Summary(), "reason", k.AllowedReason)
		case ArgsCompatible:
			c.logger.InfoContext(ctx, "args changed compatibly",
				logattr.Component, "client", logattr.Kind, k.Kind, "changes", k.Summary())
		}
	}
	return nil
}
