package twice

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// Handler works jobs of one Args type. It must converge when the same
// message is delivered twice, possibly at once on two nodes; the kind's
// Strategy does the bookkeeping that makes that structural.
type Handler[T Args] interface {
	Run(ctx context.Context, job *Job[T]) error
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc[T Args] func(ctx context.Context, job *Job[T]) error

// Run calls f.
func (f HandlerFunc[T]) Run(ctx context.Context, job *Job[T]) error { return f(ctx, job) }

// KindOpts configure a registered kind. The zero value is valid.
type KindOpts struct {
	// Strategy is how a redelivered message converges. Defaults to
	// ClaimAfter.
	Strategy Strategy
	// HandlerName scopes the kind's markers, so one message can feed two
	// handlers. Defaults to the kind.
	HandlerName string
	// Queue is where the kind's jobs go unless the enqueue says otherwise.
	// Defaults to the client's default queue.
	Queue string
	// Priority orders jobs within a queue, lower first. Defaults to 0.
	Priority int
	// MaxAttempts is the attempt after which a failure dead-letters the job.
	// Defaults to Config.MaxAttempts.
	MaxAttempts int
	// Timeout bounds one attempt. Defaults to no limit beyond the lease,
	// which the heartbeat extends.
	Timeout time.Duration
	// MaxSnoozes is how many times a job of the kind may snooze (return
	// Snooze) before it is dead-lettered with ErrTooManySnoozes. Defaults
	// to MaxSnoozesDefault (100).
	MaxSnoozes int
	// FailClosed registers the kind off unless a kill switch source
	// explicitly turns it on: for jobs that move money or cannot be undone,
	// a missing or misspelled toggle key then leaves them off. Defaults to
	// false: a kind runs unless a source turns it off.
	FailClosed bool

	// GlobalConcurrency is the most jobs of the kind running at once
	// across every node sharing the database, enforced by the store in
	// each fetch (see LimitList for the usage). Every node must register
	// the same limit. Defaults to 0: no limit.
	GlobalConcurrency int
	// KeyConcurrency is the most jobs of one concurrency key (a tenant, a
	// customer: see ConcurrencyKey) running at once across every node,
	// started in enqueue order: with 1 the kind is sequential by key, a
	// job never starting before an earlier one finished, retries included
	// (unless KeyOrderSkipsRetries). Jobs with no key are not limited by
	// key. Defaults to 0: no limit.
	KeyConcurrency int
	// KeyOrderSkipsRetries lets the later jobs of a key start while an
	// earlier one waits for its retry (or a snooze), for keys whose jobs
	// are independent: one failing tenant's webhook must not stall its
	// next ones. Once due, the retry is back in line at its enqueue place,
	// and KeyConcurrency still counts every running job. Needs
	// KeyConcurrency. Defaults to false: retries keep the order.
	KeyOrderSkipsRetries bool
	// ConcurrencyKey names the args field, by JSON name, whose value (a
	// string, number or boolean) is a job's concurrency key; an args type
	// with a ConcurrencyKey() string method gives its key that way instead.
	// Required by KeyConcurrency and KeyRateLimit, refused without them.
	// The key is taken at enqueue by a client that registers the kind: a
	// raw-JSON enqueue of a kind only workers know carries none. Defaults
	// to none.
	ConcurrencyKey string
	// RateLimit bounds how many jobs of the kind start per period across
	// every node (a sliding-window log in the store: see RateLimit).
	// Defaults to none.
	RateLimit RateLimit
	// KeyRateLimit bounds how many jobs of one concurrency key start per
	// period across every node. Defaults to none.
	KeyRateLimit RateLimit

	// Unique makes enqueues of the kind unique by args, queue and period
	// (see UniqueOpts); an enqueue's own EnqueueOpts.Unique replaces it.
	// Defaults to none: only an explicit EnqueueOpts.UniqueKey dedupes.
	Unique *UniqueOpts

	// ArgsChangeAllowed says, with the reason, that an incompatible change
	// of the kind's args (a field removed or renamed, or of another JSON
	// type, while stored jobs or a live worker still carry it: see
	// Client.CheckArgs) is deliberate: Start then logs the change and the
	// reason as a warning and starts, instead of refusing to. The jobs
	// that carry the old shape may fail; register a new version instead
	// unless they were dealt with. Defaults to empty: such a change
	// refuses the start.
	ArgsChangeAllowed string
}

// kindEntry is a registered kind: its options and a type-erased runner that
// decodes the args and calls the user's handler.
type kindEntry struct {
	kind     string
	opts     KindOpts
	argsType reflect.Type
	run      func(ctx context.Context, row *twicetype.JobRow, tx twicestore.Tx) error
	decode   func(raw []byte) (Args, error) // strict: no unknown fields
}

// Registry holds the kinds a client knows, their handlers, and the
// recurring schedules its scheduler runs.
type Registry struct {
	mu        sync.RWMutex
	kinds     map[string]*kindEntry
	schedules map[string]*schedule
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{kinds: make(map[string]*kindEntry)}
}

// Register adds a handler for T's kind. It checks the kind's name and the
// payload policy of T, and refuses a kind registered twice.
func Register[T Args](r *Registry, h Handler[T], opts *KindOpts) error {
	var zero T
	t := reflect.TypeOf(zero)
	if t == nil {
		return fmt.Errorf("register: args type is an interface; register a concrete struct type")
	}
	if t.Kind() == reflect.Pointer {
		return fmt.Errorf("register %s: args must be a struct value, not a pointer; implement Kind on %s", t, t.Elem())
	}
	kind := zero.Kind()
	if err := ValidateKind(kind); err != nil {
		return fmt.Errorf("register %s: %w", t, err)
	}
	if err := checkPayloadType(t); err != nil {
		return fmt.Errorf("register %q: %w", kind, err)
	}
	if h == nil {
		return fmt.Errorf("register %q: handler is nil", kind)
	}
	o := KindOpts{}
	if opts != nil {
		o = *opts
	}
	if o.Strategy < ClaimAfter || o.Strategy > None {
		return fmt.Errorf("register %q: unknown strategy %d", kind, o.Strategy)
	}
	if o.HandlerName == "" {
		o.HandlerName = kind
	}
	if o.MaxSnoozes < 0 {
		return fmt.Errorf("register %q: MaxSnoozes is %d; use 0 for the default or a positive number", kind, o.MaxSnoozes)
	}
	if o.MaxAttempts < 0 {
		return fmt.Errorf("register %q: MaxAttempts is %d; use 0 for the default or a positive number", kind, o.MaxAttempts)
	}
	if o.Queue != "" {
		if err := ValidateQueue(o.Queue); err != nil {
			return fmt.Errorf("register %q: KindOpts.Queue: %w", kind, err)
		}
	}
	if err := checkLimits(t, &o); err != nil {
		return fmt.Errorf("register %q: %w", kind, err)
	}
	if o.Unique != nil {
		if err := o.Unique.check(t, ArgFields(t)); err != nil {
			return fmt.Errorf("register %q: KindOpts.Unique: %w", kind, err)
		}
	}
	if err := checkZeroEncoding(zero); err != nil {
		return fmt.Errorf("register %q: args type %s: its JSON encoding %w", kind, t, err)
	}
	entry := &kindEntry{
		kind:     kind,
		opts:     o,
		argsType: t,
		run: func(ctx context.Context, row *twicetype.JobRow, tx twicestore.Tx) error {
			job := &Job[T]{
				ID: row.ID, Kind: row.Kind, Queue: row.Queue,
				MessageID: row.MessageID, Key: row.Key, CorrelationID: row.CorrelationID,
				Attempt: row.Attempt, MaxAttempts: row.MaxAttempts, Epoch: row.Epoch,
				CreatedAt: row.CreatedAt, tx: tx, edges: edgeSetOf(ctx), steps: runFrom(ctx),
			}
			if err := strictUnmarshal(row.Args, &job.Args); err != nil {
				return Permanent(fmt.Errorf("decode args of kind %q into %s (strictly: a field the type does not declare "+
					"is refused rather than dropped): %w", row.Kind, t, err))
			}
			return h.Run(ctx, job)
		},
		decode: func(raw []byte) (Args, error) {
			var v T
			err := strictUnmarshal(raw, &v)
			return v, err
		},
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.kinds[kind]; dup {
		return fmt.Errorf("register %q: kind is already registered; each kind has one handler (use a new version for a new shape)", kind)
	}
	r.kinds[kind] = entry
	return nil
}

// MustRegister is Register that panics on error, for wiring at start-up.
func MustRegister[T Args](r *Registry, h Handler[T], opts *KindOpts) {
	if err := Register(r, h, opts); err != nil {
		panic(err)
	}
}

// Kinds lists the registered kinds, sorted.
func (r *Registry) Kinds() []string {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	kinds := make([]string, 0, len(r.kinds))
	for k := range r.kinds {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	return kinds
}

func (r *Registry) lookup(kind string) *kindEntry {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.kinds[kind]
}

// FailClosed reports whether kind is registered fail-closed.
func (r *Registry) FailClosed(kind string) bool {
	e := r.lookup(kind)
	return e != nil && e.opts.FailClosed
}

// ValidateArgs checks raw JSON args against the registered type of kind:
// it must decode with no unknown fields. It returns an error for a kind
// that is not registered.
func (r *Registry) ValidateArgs(kind string, raw []byte) error {
	e := r.lookup(kind)
	if e == nil {
		return fmt.Errorf("kind %q is not registered", kind)
	}
	if _, err := e.decode(raw); err != nil {
		return fmt.Errorf("args for kind %q do not match %s: %w", kind, e.argsType, err)
	}
	return nil
}

// checkZeroEncoding applies the payload policy to the encoding of an args
// type's zero value when the type encodes itself, so a MarshalJSON that
// adds a field is refused at registration rather than at the first
// enqueue. A zero value that cannot be encoded proves nothing, and its
// MarshalJSON may even panic on it: both are left to the enqueue's check.
func checkZeroEncoding(zero Args) (err error) {
	shape := shapeOf(reflect.TypeOf(zero))
	if !shape.customJSON {
		return nil
	}
	defer func() {
		if recover() != nil {
			err = nil
		}
	}()
	b, mErr := json.Marshal(zero)
	if mErr != nil {
		return nil
	}
	return shape.checkEncoded(b)
}

// ArgFields describes the args of a registered kind as they are stored
// (JSON name, JSON type, sensitive flag), and reports whether kind is
// registered.
func (r *Registry) ArgFields(kind string) (fields []ArgField, registered bool) {
	e := r.lookup(kind)
	if e == nil {
		return nil, false
	}
	return ArgFields(e.argsType), true
}

// SensitiveFields lists the JSON names of kind's args fields tagged
// `twice:"sensitive"`, for redaction where args are shown, and reports
// whether kind is registered: when it is not, no field can be recognised
// as sensitive.
func (r *Registry) SensitiveFields(kind string) (fields []string, registered bool) {
	e := r.lookup(kind)
	if e == nil {
		return nil, false
	}
	return SensitiveFields(e.argsType), true
}
