package twice

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// EnqueueOpts are per-call options. Each zero field falls back to the kind's
// registration, then to the client's default.
type EnqueueOpts struct {
	// Queue to put the job in.
	Queue string
	// Priority orders jobs within a queue, lower first.
	Priority int
	// RunAt delays the job until then.
	RunAt time.Time
	// Delay delays the job by this much from now, at most 100 years;
	// ignored when RunAt is set.
	Delay time.Duration
	// MaxAttempts before the job is dead-lettered.
	MaxAttempts int
	// UniqueKey makes the enqueue a no-op while an unfinished job of the
	// same kind has the same key: the result is that job, with Duplicate
	// set.
	UniqueKey string
	// Unique derives the unique key from the args, queue and period, and
	// can replace a waiting duplicate (see UniqueOpts). It replaces the
	// kind's KindOpts.Unique; an explicit UniqueKey wins over its key.
	Unique *UniqueOpts
	// MessageID sets the message id instead of a new UUID (for a producer
	// that retries a publish of the same message).
	MessageID string
	// CorrelationID overrides the one from the context.
	CorrelationID string
	// Metadata is stored with the job, over Config.EnqueueMetadata's.
	Metadata map[string]string
	// AllowUnknownKind lets EnqueueJSON store a kind that no registry,
	// catalog or live worker knows; its keys still get the payload
	// policy's name rule. Defaults to false: a typo is refused.
	AllowUnknownKind bool
}

// EnqueueParams is one job of a batch.
type EnqueueParams struct {
	Args Args
	Opts *EnqueueOpts
}

// EnqueueResult is an enqueued job.
type EnqueueResult struct {
	// Job is the stored job: the new one, or the existing one for a
	// duplicate.
	Job *twicetype.JobRow
	// Duplicate reports that the unique key matched an unfinished job and
	// nothing was inserted.
	Duplicate bool
	// Replaced reports that, with OnConflictReplace, the duplicate was
	// waiting and now has this enqueue's args and run time.
	Replaced bool
}

// Enqueue stores one job.
func (c *Client) Enqueue(ctx context.Context, args Args, opts *EnqueueOpts) (*EnqueueResult, error) {
	res, err := c.enqueue(ctx, c.store, []EnqueueParams{{Args: args, Opts: opts}}, true)
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// EnqueueTx stores one job in the caller's transaction on the store's
// database (for SQLite, a *sql.Tx): the job commits with the caller's own
// writes or not at all.
func (c *Client) EnqueueTx(ctx context.Context, tx any, args Args, opts *EnqueueOpts) (*EnqueueResult, error) {
	exec, err := c.store.ExecutorFromTx(tx)
	if err != nil {
		return nil, fmt.Errorf("twice: enqueue in transaction: %w", err)
	}
	res, err := c.enqueue(ctx, exec, []EnqueueParams{{Args: args, Opts: opts}}, false)
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// EnqueueMany stores a batch of jobs in one round trip. If any job fails
// validation, none is stored.
func (c *Client) EnqueueMany(ctx context.Context, jobs []EnqueueParams) ([]*EnqueueResult, error) {
	return c.enqueue(ctx, c.store, jobs, true)
}

// EnqueueManyTx is EnqueueMany in the caller's transaction.
func (c *Client) EnqueueManyTx(ctx context.Context, tx any, jobs []EnqueueParams) ([]*EnqueueResult, error) {
	exec, err := c.store.ExecutorFromTx(tx)
	if err != nil {
		return nil, fmt.Errorf("twice: enqueue in transaction: %w", err)
	}
	return c.enqueue(ctx, exec, jobs, false)
}

// ErrUnknownKind is returned by EnqueueJSON for a kind that neither this
// client registers nor any live worker handles (usage).
var ErrUnknownKind = usageError("unknown job kind")

// ErrInvalidArgs is wrapped by the enqueue errors that are the caller's
// input at fault: a malformed kind, args that are not a JSON object or do
// not fit the kind's type, args over the size limit or against the payload
// policy, a malformed queue name, a unique key or message id that is too
// long or not UTF-8 text (usage).
var ErrInvalidArgs = usageError("invalid job args")

// EnqueueJSON stores one job from raw JSON args, for tools that do not have
// the Go type (the CLI). A kind registered with this client must decode
// into its args type with no unknown fields; a kind a live worker handles
// or a worker published to the kind catalog (its jobs wait while that
// worker is down) must pass CheckArgsJSON against the fields the catalog
// holds for it (or, when it holds none, the name rule on its keys); any
// other kind is refused with ErrUnknownKind, so a typo never queues a job
// nobody will run, unless opts.AllowUnknownKind. A registered kind is decoded into its type and enqueued
// as Enqueue would, so its IdempotencyKey applies. A catalogued kind this
// client does not register takes the catalog's queue and max attempts
// where opts give none, as PostgreSQL's twice_enqueue does, so its job
// goes to the queue its worker listens on.
func (c *Client) EnqueueJSON(ctx context.Context, kind string, raw []byte, opts *EnqueueOpts) (*EnqueueResult, error) {
	if err := ValidateKind(kind); err != nil {
		return nil, fmt.Errorf("twice: enqueue: %w: %w", ErrInvalidArgs, err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil || !bytes.HasPrefix(compact.Bytes(), []byte("{")) {
		return nil, fmt.Errorf("twice: enqueue %q: %w: args are not a JSON object: pass one like '{\"user_id\": 42}'", kind, ErrInvalidArgs)
	}
	if e := c.registry.lookup(kind); e != nil {
		args, err := e.decode(compact.Bytes())
		if err != nil {
			return nil, fmt.Errorf("twice: enqueue: %w: args for kind %q do not match %s: %w", ErrInvalidArgs, kind, e.argsType, err)
		}
		return c.Enqueue(ctx, args, opts)
	}
	known, err := c.liveKinds(ctx)
	if err != nil {
		return nil, fmt.Errorf("twice: enqueue %q: %w", kind, err)
	}
	info, err := c.catalogKind(ctx, kind)
	if err != nil {
		return nil, fmt.Errorf("twice: enqueue %q: %w", kind, err)
	}
	if !known[kind] && info == nil && (opts == nil || !opts.AllowUnknownKind) {
		return nil, fmt.Errorf("twice: enqueue %q: %w: no registered handler, catalogued kind or live worker knows it (known kinds: %s)",
			kind, ErrUnknownKind, strings.Join(c.knownKinds(known), ", "))
	}
	// A catalogued kind is checked against the fields its node put in the
	// kind catalog (names, JSON types). Without them the raw keys get the
	// name rule that registration gives Go fields, so a secret cannot ride
	// in by JSON either way.
	var fields []ArgField
	if info != nil && len(info.Args) > 0 {
		// An empty list is no list: the catalog stores a kind whose type
		// encodes itself (ArgFields nil) as [] too, as twice_enqueue reads it.
		fields = info.Args
	}
	if err := CheckArgsJSON(kind, compact.Bytes(), fields, c.cfg.MaxArgsBytes); err != nil {
		return nil, fmt.Errorf("twice: enqueue: %w", err)
	}
	// The catalog's queue and max attempts stand in for the registration
	// this client does not have (call, then kind, then client default), as
	// they do for twice_enqueue: a job goes where its worker listens.
	o := EnqueueOpts{}
	if opts != nil {
		o = *opts
	}
	if info != nil {
		o.Queue = cmp.Or(o.Queue, info.Queue)
		o.MaxAttempts = cmp.Or(o.MaxAttempts, info.MaxAttempts)
	}
	ctx, end := c.traceEnqueue(ctx, traceOpEnqueue, 1)
	p, err := c.insertParams(ctx, kind, compact.Bytes(), "", &o)
	if err != nil {
		err = fmt.Errorf("twice: enqueue: %w: %w", ErrInvalidArgs, err)
		end(nil, err)
		return nil, err
	}
	res, err := c.insert(ctx, c.store, []*twicestore.JobInsertParams{p}, true)
	end(insertedRows(res), err)
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// liveKinds returns the kinds that live workers handle.
func (c *Client) liveKinds(ctx context.Context) (map[string]bool, error) {
	nodes, err := c.store.NodeList(ctx, &twicestore.NodeListParams{AliveSince: c.now().Add(-nodeAliveWindow)})
	if err != nil {
		return nil, err
	}
	known := map[string]bool{}
	for _, n := range nodes {
		for _, k := range n.Kinds {
			known[k] = true
		}
	}
	return known, nil
}

// catalogKind reads the kind catalog once for kind: what a worker
// published for it, live or not (its jobs wait for that worker to come
// back): its queue, max attempts and args fields. It is nil for a kind no
// worker published.
func (c *Client) catalogKind(ctx context.Context, kind string) (*twicetype.KindInfo, error) {
	res, err := c.store.CatalogList(ctx, &twicestore.CatalogListParams{})
	if err != nil {
		return nil, fmt.Errorf("read the kind catalog: %w", err)
	}
	for i := range res.Kinds {
		if res.Kinds[i].Kind == kind {
			return &res.Kinds[i], nil
		}
	}
	return nil, nil
}

func (c *Client) knownKinds(live map[string]bool) []string {
	set := map[string]bool{}
	for _, k := range c.registry.Kinds() {
		set[k] = true
	}
	for k := range live {
		set[k] = true
	}
	kinds := make([]string, 0, len(set))
	for k := range set {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	if len(kinds) == 0 {
		return []string{"none"}
	}
	return kinds
}

// enqueue stores jobs: every entry point that takes Args (Enqueue,
// EnqueueMany and their Tx twins) comes through here, and the others
// (continuations, workflows, batches) resolve their jobs with the same
// insertParamsMany.
func (c *Client) enqueue(ctx context.Context, exec twicestore.Executor, jobs []EnqueueParams, notify bool) ([]*EnqueueResult, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	ctx, end := c.traceEnqueue(ctx, traceOpEnqueue, len(jobs))
	params, err := c.insertParamsMany(ctx, jobs)
	if err != nil {
		err = fmt.Errorf("twice: enqueue: %w", err)
		end(nil, err)
		return nil, err
	}
	res, err := c.insert(ctx, exec, params, notify)
	end(insertedRows(res), err)
	return res, err
}

// queueFor is the queue a job of kind goes to: the call's, then the kind
// registration's, then the client default.
func (c *Client) queueFor(kind, callQueue string) string {
	return c.queueOf(c.registry.lookup(kind), callQueue)
}

// queueOf is queueFor for a kind already looked up: e is its registration,
// nil for a kind this client does not register.
func (c *Client) queueOf(e *kindEntry, callQueue string) string {
	var kindQueue string
	if e != nil {
		kindQueue = e.opts.Queue
	}
	return cmp.Or(callQueue, kindQueue, c.cfg.DefaultQueue)
}

// maxDelay is the longest EnqueueOpts.Delay: 100 years, the SQL
// function's bound too.
const maxDelay = time.Duration(100 * 365.25 * 24 * float64(time.Hour))

// insertParams resolves options (call, then kind, then client) and the
// envelope of a job of kind with encoded args. The kind is looked up once,
// here, and its registration (none for a kind this client does not
// register) serves the queue, uniqueness and concurrency key.
func (c *Client) insertParams(ctx context.Context, kind string, args []byte, key string, opts *EnqueueOpts) (*twicestore.JobInsertParams, error) {
	o := EnqueueOpts{}
	if opts != nil {
		o = *opts
	}
	e := c.registry.lookup(kind)
	var ko KindOpts
	if e != nil {
		ko = e.opts
	}
	now := c.now()
	p := &twicestore.JobInsertParams{
		Kind:          kind,
		Queue:         c.queueOf(e, o.Queue),
		Priority:      cmp.Or(o.Priority, ko.Priority),
		Args:          args,
		MessageID:     cmp.Or(o.MessageID, newMessageID()),
		CorrelationID: cmp.Or(o.CorrelationID, CorrelationID(ctx), newMessageID()),
		UniqueKey:     o.UniqueKey,
		MaxAttempts:   cmp.Or(o.MaxAttempts, ko.MaxAttempts, c.cfg.MaxAttempts),
		RunAt:         now,
		CreatedAt:     now,
	}
	if c.cfg.EnqueueMetadata != nil {
		p.Metadata = c.cfg.EnqueueMetadata(ctx)
	}
	if len(o.Metadata) > 0 {
		// A copy: neither the hook's map nor the caller's is written to.
		p.Metadata = maps.Clone(p.Metadata)
		if p.Metadata == nil {
			p.Metadata = make(map[string]string, len(o.Metadata))
		}
		maps.Copy(p.Metadata, o.Metadata)
	}
	p.Key = cmp.Or(key, p.MessageID)
	switch {
	case !o.RunAt.IsZero():
		p.RunAt = o.RunAt
	case o.Delay > maxDelay:
		return nil, fmt.Errorf("kind %q: Delay %s is out of range: at most 100 years (as twice_enqueue's)", kind, o.Delay)
	case o.Delay > 0:
		p.RunAt = now.Add(o.Delay)
	case o.Delay < 0:
		return nil, fmt.Errorf("kind %q: negative Delay %s", kind, o.Delay)
	}
	if p.MaxAttempts < 1 {
		return nil, fmt.Errorf("kind %q: MaxAttempts %d: use at least 1", kind, p.MaxAttempts)
	}
	if p.MaxAttempts > math.MaxInt32 {
		return nil, fmt.Errorf("kind %q: MaxAttempts %d is not a 32-bit integer: use at most %d", kind, p.MaxAttempts, math.MaxInt32)
	}
	if p.Priority < math.MinInt32 || p.Priority > math.MaxInt32 {
		return nil, fmt.Errorf("kind %q: Priority %d is not a 32-bit integer: use one from %d to %d (lower runs first)",
			kind, p.Priority, math.MinInt32, math.MaxInt32)
	}
	u, err := uniqueOf(e, o.Unique)
	if err != nil {
		return nil, fmt.Errorf("kind %q: %w", kind, err)
	}
	if u != nil {
		if p.UniqueKey == "" {
			if p.UniqueKey, err = uniqueKey(u, kind, p.Queue, args, p.RunAt); err != nil {
				return nil, fmt.Errorf("kind %q: %w", kind, err)
			}
		}
		p.Replace = u.OnConflict == OnConflictReplace
		p.UniqueStates = u.states()
	}
	if err := checkEnvelope(p); err != nil {
		return nil, fmt.Errorf("kind %q: %w", kind, err)
	}
	if e != nil {
		if p.ConcurrencyKey, err = e.concurrencyKey(args); err != nil {
			return nil, fmt.Errorf("kind %q: %w", kind, err)
		}
	}
	return p, nil
}

// checkEnvelope refuses names and keys the stores cannot hold or an
// operator cannot read, with an error that says which one, rather than the
// database's own error (or a 100 KB key that beats the args limit).
func checkEnvelope(p *twicestore.JobInsertParams) error {
	if err := ValidateQueue(p.Queue); err != nil {
		return err
	}
	for _, k := range []struct{ what, value string }{
		{"unique key", p.UniqueKey},
		{"message id", p.MessageID},
		{"idempotency key", p.Key}, // the message id unless the args name one
		{"correlation id", p.CorrelationID},
	} {
		if err := ValidateKey(k.what, k.value); err != nil {
			return err
		}
	}
	for k, v := range p.Metadata {
		if err := checkText("metadata key", k, MaxKeyBytes); err != nil {
			return err
		}
		// No length limit: metadata comes from the client's own hook
		// (a W3C tracestate may be long), not from the caller.
		if err := checkText(fmt.Sprintf("metadata %q", k), v, math.MaxInt); err != nil {
			return err
		}
	}
	return nil
}

func (c *Client) insert(ctx context.Context, exec twicestore.Executor, params []*twicestore.JobInsertParams, notify bool) ([]*EnqueueResult, error) {
	res, err := exec.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: params})
	if err != nil {
		return nil, fmt.Errorf("twice: enqueue: %w", err)
	}
	c.observeInserted(res)
	out := make([]*EnqueueResult, len(res.Jobs))
	due := false
	for i, r := range res.Jobs {
		out[i] = &EnqueueResult{Job: r.Job, Duplicate: r.Duplicate, Replaced: r.Replaced}
		due = due || ((!r.Duplicate || r.Replaced) && !r.Job.RunAt.After(c.now()))
	}
	if notify && due {
		c.notify()
	}
	return out, nil
}

// notify wakes this client's fetch loop, if it runs.
func (c *Client) notify() { c.worker.notify() }
