package twice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/twicejobs/twice/internal/backoff"
	"github.com/twicejobs/twice/internal/freetext"
	"github.com/twicejobs/twice/twicetype"
)

// The built-in queues, served in this order of priority by default.
const (
	QueueCritical = "critical"
	QueueDefault  = "default"
	QueueBulk     = "bulk"
)

// Defaults for Config fields left zero.
const (
	LeaseDurationDefault   = 5 * time.Minute
	MaxAttemptsDefault     = 20
	MarkerRetentionDefault = 7 * 24 * time.Hour
	PollIntervalDefault    = time.Second
	RescueIntervalDefault  = 30 * time.Second
	ShutdownGraceDefault   = 30 * time.Second
	FetchLimitDefault      = 1000
	// Finished jobs are deleted after these windows: completed ones soon,
	// dead ones only after a human had time to look.
	CompletedRetentionDefault = 24 * time.Hour
	DeadRetentionDefault      = 30 * 24 * time.Hour
	DiscardedRetentionDefault = 7 * 24 * time.Hour
	// ToggleHistoryRetentionDefault keeps switch flips for a quarter of a
	// year: long enough to answer "who turned this off, and why?" well
	// after an incident.
	ToggleHistoryRetentionDefault = 90 * 24 * time.Hour
	// KeepForever, as a retention, keeps what it applies to forever.
	KeepForever time.Duration = -1
)

// QueueConfig is one queue a worker serves.
type QueueConfig struct {
	// Name of the queue: lower-case letters, digits, '_', '-' and '.', at
	// most MaxQueueBytes (see ValidateQueue).
	Name string
	// Concurrency is the most jobs of this queue run at once. Defaults to
	// 10.
	Concurrency int
}

// QueueOrder is how a worker shares its slots between queues.
type QueueOrder int

const (
	// StrictPriority fetches from each queue only after the ones before it
	// in Config.Queues had their fill: critical work starves bulk work, on
	// purpose.
	StrictPriority QueueOrder = iota
	// RoundRobin starts each fetch round at the next queue, so every queue
	// gets slots when the worker is saturated.
	RoundRobin
)

// Middleware wraps one call of a handler. job is the leased row (treat it as
// read-only); next calls the rest of the chain and then the handler, with
// the context it is given. A middleware normally calls next once and
// returns its error; returning an error without calling next counts as the
// handler failing with it, and a panic is recovered like the handler's own.
type Middleware func(ctx context.Context, job *twicetype.JobRow, next func(ctx context.Context) error) error

// DeadJob describes a job that was just dead-lettered, for the OnDead hook.
type DeadJob struct {
	Job *twicetype.JobRow
	Err error
}

// Config configures a Client. The zero value is a producer-only client on
// the default queues.
type Config struct {
	// Registry holds the kinds this client works. Nil means the client only
	// enqueues.
	Registry *Registry
	// Queues are the queues worked, in priority order. Defaults to
	// critical (10), default (10) and bulk (5).
	Queues []QueueConfig
	// QueueOrder is how slots are shared between queues. Defaults to
	// StrictPriority.
	QueueOrder QueueOrder
	// MaxWorkers bounds the jobs running at once across all queues. Left
	// to its default, it follows the queues' concurrency overrides
	// (Client.QueueConcurrencySet). Defaults to the sum of the queues'
	// concurrency.
	MaxWorkers int
	// DefaultQueue is where jobs go when neither the enqueue nor the kind
	// names a queue. Defaults to QueueDefault.
	DefaultQueue string
	// LeaseDuration is how long a fetched job is held before another worker
	// may take it; a heartbeat extends it while the handler runs. Defaults
	// to LeaseDurationDefault.
	LeaseDuration time.Duration
	// MaxAttempts is the default number of attempts before a job is
	// dead-lettered. Defaults to MaxAttemptsDefault.
	MaxAttempts int
	// Backoff returns the wait after failed attempt n (1-based). Defaults to
	// exponential from 1s, capped at 1h, with up to 20% jitter.
	Backoff func(attempt int) time.Duration
	// MaxArgsBytes is the largest encoded payload Enqueue accepts. Defaults
	// to MaxArgsBytesDefault (2 KiB).
	MaxArgsBytes int
	// MarkerRetention is how long markers are kept. It must exceed the
	// longest retry horizon of any kind, or a late retry would find its
	// marker pruned and run the effect again; NewClient refuses a shorter
	// one. Defaults to MarkerRetentionDefault.
	MarkerRetention time.Duration
	// CompletedRetention is how long completed jobs are kept. KeepForever
	// keeps them. Defaults to CompletedRetentionDefault.
	CompletedRetention time.Duration
	// DeadRetention is how long dead jobs are kept. KeepForever keeps them.
	// Defaults to DeadRetentionDefault.
	DeadRetention time.Duration
	// DiscardedRetention is how long discarded and cancelled jobs are
	// kept: both were ended on purpose and need no one. KeepForever keeps
	// them. Defaults to DiscardedRetentionDefault.
	DiscardedRetention time.Duration
	// ToggleHistoryRetention is how long the switch history and the
	// limit history keep a change (twice toggles history, twice limits
	// history). The newest change of each switch and each limit override
	// is kept however old, since it says who set it as it stands.
	// KeepForever keeps every change. Defaults to
	// ToggleHistoryRetentionDefault.
	ToggleHistoryRetention time.Duration
	// TogglesFile is a TOML file of kill switches, reloaded whenever it
	// changes. Defaults to none.
	TogglesFile string
	// TogglePollInterval is how often the store's kill switches are read.
	// Defaults to TogglePollIntervalDefault.
	TogglePollInterval time.Duration
	// PollInterval is the fallback fetch interval when no wake-up arrives.
	// Defaults to PollIntervalDefault.
	PollInterval time.Duration
	// RescueInterval is how often expired leases are looked for. Defaults to
	// RescueIntervalDefault.
	RescueInterval time.Duration
	// FetchLimit is the most jobs one fetch takes. A fetch never takes more
	// than the free slots, so this only matters for a worker with many:
	// one round trip then fills them all. Defaults to FetchLimitDefault.
	FetchLimit int
	// Middleware wraps every call of a handler, the first entry outermost:
	// tracing, metrics, a test's call counter. It runs inside the kind's
	// strategy, so a delivery that the marker turns into a no-op never
	// reaches it, and for Transactional kinds it runs inside the
	// transaction. Defaults to none.
	Middleware []Middleware
	// EnqueueMetadata, when set, is called on every enqueue with the
	// enqueuer's context and returns metadata stored with the job, which
	// a Middleware can restore into the handler's context
	// (twiceotel.Inject carries the OpenTelemetry trace context this way).
	// Defaults to none.
	EnqueueMetadata func(ctx context.Context) map[string]string
	// Tracer, when set, gets a span per enqueue, per delivery and per
	// named step (twiceotel.Tracer for OpenTelemetry). Defaults to none.
	Tracer Tracer
	// Observer is told what happens to jobs (enqueued, started,
	// completed, retried, dead, skipped, duplicates), for metrics: see
	// twicemetrics. Defaults to none.
	Observer Observer
	// OnDead is called after a job is dead-lettered (for alerting). It runs
	// on the completion path, so it should be quick.
	OnDead func(ctx context.Context, dead DeadJob)
	// Logger receives the runtime's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// NodeID names this worker process in leases and the nodes table:
	// UTF-8 text without NUL bytes, at most MaxNameBytes. Defaults to
	// host-pid-random.
	NodeID string
	// WaitTokenKey signs the wait tokens handlers hand out (WaitToken) and
	// checks the ones that come back (Client.SignalByToken): a secret of
	// at least 32 random bytes, the same in every process that mints or
	// takes tokens. Changing it voids the tokens out; WaitToken without it
	// fails, saying to set it. Defaults to none.
	WaitTokenKey []byte
	// Redeliver delivers every job a second time, sometimes concurrently,
	// so a handler that does not converge fails in development rather than
	// in production. Not for production: it doubles the work.
	Redeliver bool

	// backoffMax is Backoff at its largest, for the retention check.
	backoffMax func(attempt int) time.Duration
	// maxWorkersFromQueues records that MaxWorkers was left to its
	// default, so it follows the queues' concurrency overrides.
	maxWorkersFromQueues bool
}

func (c Config) withDefaults() Config {
	if len(c.Queues) == 0 {
		c.Queues = []QueueConfig{{QueueCritical, 10}, {QueueDefault, 10}, {QueueBulk, 5}}
	} else {
		c.Queues = append([]QueueConfig(nil), c.Queues...)
	}
	for i := range c.Queues {
		if c.Queues[i].Concurrency == 0 {
			c.Queues[i].Concurrency = 10
		}
	}
	if c.MaxWorkers == 0 {
		c.maxWorkersFromQueues = true
		for _, q := range c.Queues {
			c.MaxWorkers += q.Concurrency
		}
	}
	if c.DefaultQueue == "" {
		c.DefaultQueue = QueueDefault
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = LeaseDurationDefault
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = MaxAttemptsDefault
	}
	if c.Backoff == nil {
		c.Backoff, c.backoffMax = backoff.Delay, backoff.MaxDelay
	} else {
		c.backoffMax = c.Backoff
	}
	if c.MaxArgsBytes == 0 {
		c.MaxArgsBytes = MaxArgsBytesDefault
	}
	if c.MarkerRetention == 0 {
		c.MarkerRetention = MarkerRetentionDefault
	}
	if c.CompletedRetention == 0 {
		c.CompletedRetention = CompletedRetentionDefault
	}
	if c.DeadRetention == 0 {
		c.DeadRetention = DeadRetentionDefault
	}
	if c.DiscardedRetention == 0 {
		c.DiscardedRetention = DiscardedRetentionDefault
	}
	if c.ToggleHistoryRetention == 0 {
		c.ToggleHistoryRetention = ToggleHistoryRetentionDefault
	}
	if c.PollInterval == 0 {
		c.PollInterval = PollIntervalDefault
	}
	if c.TogglePollInterval == 0 {
		c.TogglePollInterval = TogglePollIntervalDefault
	}
	if c.RescueInterval == 0 {
		c.RescueInterval = RescueIntervalDefault
	}
	if c.FetchLimit == 0 {
		c.FetchLimit = FetchLimitDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.NodeID == "" {
		host, _ := os.Hostname()
		host = host[:min(len(host), maxNodeHostBytes)]
		c.NodeID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), newMessageID()[:8])
	}
	return c
}

// maxNodeHostBytes cuts the host name in the default NodeID, so the id
// stays within MaxNameBytes whatever the host is called (Linux allows 64
// bytes, other systems more).
const maxNodeHostBytes = 64

// validate checks a defaulted config.
func (c Config) validate() error {
	var errs []error
	seen := map[string]bool{}
	for _, q := range c.Queues {
		if q.Name == "" {
			errs = append(errs, errors.New("a queue has no name"))
		} else if err := ValidateQueue(q.Name); err != nil {
			errs = append(errs, fmt.Errorf("Config.Queues: %w", err))
			continue
		}
		if seen[q.Name] {
			errs = append(errs, fmt.Errorf("queue %q is listed twice", q.Name))
		}
		seen[q.Name] = true
		if q.Concurrency < 0 {
			errs = append(errs, fmt.Errorf("queue %q has concurrency %d; use a positive number", q.Name, q.Concurrency))
		}
	}
	// A node id PostgreSQL cannot store would make a worker whose every
	// fetch fails: it would never run a job.
	if err := freetext.Check("Config.NodeID", c.NodeID, MaxNameBytes); err != nil {
		errs = append(errs, err)
	}
	if err := ValidateQueue(c.DefaultQueue); err != nil {
		errs = append(errs, fmt.Errorf("Config.DefaultQueue: %w", err))
	}
	if c.LeaseDuration < time.Second {
		errs = append(errs, fmt.Errorf("LeaseDuration %s is under 1s: the heartbeat could not keep leases alive", c.LeaseDuration))
	}
	if c.MaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("MaxAttempts %d: use at least 1", c.MaxAttempts))
	}
	if n := len(c.WaitTokenKey); n > 0 && n < minWaitTokenKeyBytes {
		errs = append(errs, fmt.Errorf("WaitTokenKey is %d bytes: use at least %d random bytes", n, minWaitTokenKeyBytes))
	}
	if c.MaxArgsBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxArgsBytes %d: use a positive limit", c.MaxArgsBytes))
	}
	for name, d := range map[string]time.Duration{
		"CompletedRetention": c.CompletedRetention, "DeadRetention": c.DeadRetention, "DiscardedRetention": c.DiscardedRetention,
		"ToggleHistoryRetention": c.ToggleHistoryRetention,
	} {
		if d < 0 && d != KeepForever {
			errs = append(errs, fmt.Errorf("%s %s is negative: use a positive window, or twice.KeepForever", name, d))
		}
	}
	if c.QueueOrder != StrictPriority && c.QueueOrder != RoundRobin {
		errs = append(errs, fmt.Errorf("unknown QueueOrder %d", c.QueueOrder))
	}
	if err := c.checkRetention(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkRetention refuses a marker retention that a retry could outlive.
func (c Config) checkRetention() error {
	maxAttempts, kind := c.MaxAttempts, "the client default"
	for _, k := range c.Registry.Kinds() {
		if e := c.Registry.lookup(k); e.opts.MaxAttempts > maxAttempts {
			maxAttempts, kind = e.opts.MaxAttempts, fmt.Sprintf("kind %q", k)
		}
	}
	horizon := backoff.Horizon(maxAttempts, c.backoffMax) + c.LeaseDuration
	if c.MarkerRetention <= horizon {
		return fmt.Errorf("MarkerRetention %s is shorter than the longest retry horizon %s (%s, %d attempts): "+
			"a late retry would find its marker pruned and repeat the effect; raise MarkerRetention above %s or lower MaxAttempts",
			c.MarkerRetention, horizon.Round(time.Second), kind, maxAttempts, horizon.Round(time.Second))
	}
	return nil
}
