// Package bench measures twice's throughput and latency on a store: it
// runs one workload (burndown, steady, latency or signal) of no-op jobs through a
// real client and returns a Result, the one-line summary `twice bench`
// prints. bench/compare runs the same workloads next to River's.
//
// It is public only because bench/compare, a module of its own, and the
// command line (twicecli) both import it, and Go's internal rule has no
// folder both can reach but the root's; it is a measuring tool, not part
// of twice's API, and changes with the benchmarks.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
)

// The workloads.
const (
	// ModeBurndown inserts Jobs jobs, then starts the worker and times it
	// until every outcome is written.
	ModeBurndown = "burndown"
	// ModeSteady inserts and works at once for Duration, keeping a backlog
	// in the queue, and counts the jobs worked.
	ModeSteady = "steady"
	// ModeLatency enqueues one job at a time at Rate a second for Duration
	// and measures each job's enqueue-to-start time.
	ModeLatency = "latency"
	// ModeSignal parks Rate×Duration jobs that await a signal, then sends
	// their signals one at a time at Rate a second and measures each
	// job's signal-to-start time.
	ModeSignal = "signal"
)

// Defaults for Config fields left zero.
const (
	JobsDefault     = 100_000
	DurationDefault = 10 * time.Second
	RateDefault     = 500
	WorkersDefault  = 100
	StrategyDefault = "none"
)

// Strategies lists the strategies a bench runs its kind with.
var Strategies = []string{"none", "claim-after", "transactional"}

// Modes lists the workloads.
var Modes = []string{ModeBurndown, ModeSteady, ModeLatency, ModeSignal}

// insertBatch is how many jobs one EnqueueMany carries.
const insertBatch = 1000

// Config describes one bench run.
type Config struct {
	// Store is where the jobs live.
	Store twicestore.Store
	// Mode is one of Modes.
	Mode string
	// Strategy is one of Strategies. Defaults to StrategyDefault.
	Strategy string
	// Jobs is the burndown's job count. Defaults to JobsDefault.
	Jobs int
	// Duration is how long steady and latency run. Defaults to
	// DurationDefault.
	Duration time.Duration
	// Rate is the latency mode's enqueues a second. Defaults to
	// RateDefault.
	Rate int
	// Parked is how many jobs wait, parked on a signal that never comes,
	// in the queue beside a burndown's or a steady run's work: they are
	// parked before the timing starts. Defaults to none.
	Parked int
	// Workers is the worker's concurrency. Defaults to WorkersDefault.
	Workers int
	// FetchLimit is the client's Config.FetchLimit. Defaults to twice's
	// default.
	FetchLimit int
	// Progress, when set, receives a progress line every second.
	Progress io.Writer
	// Logger receives the client's logs. Defaults to discarding them.
	Logger *slog.Logger
	// Observer is the client's Config.Observer, to measure what one costs.
	// Defaults to none.
	Observer twice.Observer
	// Tracer and EnqueueMetadata are the client's, to measure what
	// tracing costs. Default to none.
	Tracer          twice.Tracer
	EnqueueMetadata func(context.Context) map[string]string
}

// Result is a run's summary, printed as one JSON line.
type Result struct {
	System   string  `json:"system,omitempty"`
	Mode     string  `json:"mode"`
	Strategy string  `json:"strategy"`
	Jobs     int     `json:"jobs"`
	Seconds  float64 `json:"seconds"`
	JobsPerS float64 `json:"jobs_per_s"`
	// P50ms, P95ms and P99ms are percentiles of the latency mode's
	// enqueue-to-start times, and of the steady mode's fetch-to-start
	// times (from the start of the fetch that leased a job to its start:
	// how long leased jobs wait for a worker). A burn-down has none.
	P50ms float64 `json:"p50_ms"`
	P95ms float64 `json:"p95_ms"`
	P99ms float64 `json:"p99_ms"`
	// EnqueueP50ms and EnqueueP99ms are the latency mode's enqueue times,
	// from a job's At to its Enqueue's return: the share of P50ms and
	// P99ms spent before the job was committed.
	EnqueueP50ms float64 `json:"enqueue_p50_ms,omitempty"`
	EnqueueP99ms float64 `json:"enqueue_p99_ms,omitempty"`
	MaxRSSMB     float64 `json:"max_rss_mb"`
}

func (c Config) withDefaults() Config {
	if c.Strategy == "" {
		c.Strategy = StrategyDefault
	}
	if c.Jobs == 0 {
		c.Jobs = JobsDefault
	}
	if c.Duration == 0 {
		c.Duration = DurationDefault
	}
	if c.Rate == 0 {
		c.Rate = RateDefault
	}
	if c.Workers == 0 {
		c.Workers = WorkersDefault
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports what is wrong with c, after defaults, in words a flag's
// user can act on.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case !slices.Contains(Modes, c.Mode):
		return fmt.Errorf("mode %q: use burndown, steady, latency or signal", c.Mode)
	case !slices.Contains(Strategies, c.Strategy):
		return fmt.Errorf("strategy %q: use none, claim-after or transactional", c.Strategy)
	case c.Jobs < 0:
		return fmt.Errorf("jobs %d: give a positive number of jobs", c.Jobs)
	case c.Duration < 0:
		return fmt.Errorf("duration %s: give a positive duration such as 10s", c.Duration)
	case c.Rate < 0:
		return fmt.Errorf("rate %d: give a positive number of jobs a second", c.Rate)
	case c.Rate > 100_000:
		return fmt.Errorf("rate %d: the latency mode enqueues one job at a time; use at most 100000 a second", c.Rate)
	case c.Parked < 0:
		return fmt.Errorf("parked %d: give a positive number of jobs", c.Parked)
	case c.Workers < 0:
		return fmt.Errorf("workers %d: give a positive number of workers", c.Workers)
	}
	return nil
}

// Run runs the workload c describes and returns its summary. The jobs it
// inserts carry a run id, so jobs an interrupted earlier run left in the
// store are worked but not counted.
func Run(ctx context.Context, c Config) (*Result, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Store == nil {
		return nil, errors.New("bench: no store")
	}
	c = c.withDefaults()
	strategy, err := twice.ParseStrategy(c.Strategy)
	if err != nil {
		return nil, err
	}
	r := &runner{cfg: c, runID: rand.Int64N(1 << 53), strategy: strategy}
	if c.Parked > 0 && (c.Mode == ModeBurndown || c.Mode == ModeSteady) {
		if _, err := r.park(ctx, c.Parked); err != nil {
			return nil, err
		}
	}
	var res *Result
	switch c.Mode {
	case ModeSignal:
		res, err = r.signal(ctx)
	case ModeBurndown:
		res, err = r.burndown(ctx)
	case ModeSteady:
		res, err = r.steady(ctx)
	default:
		res, err = r.latency(ctx)
	}
	if err != nil {
		return nil, err
	}
	res.Mode, res.Strategy, res.MaxRSSMB = c.Mode, c.Strategy, MaxRSSMB()
	if res.Seconds > 0 {
		res.JobsPerS = round(float64(res.Jobs)/res.Seconds, 1)
	}
	return res, nil
}

// Percentiles fills p50, p95 and p99 of latencies (sorted in place), in
// milliseconds.
func (r *Result) Percentiles(latencies []time.Duration) {
	if len(latencies) == 0 {
		return
	}
	slices.Sort(latencies)
	pct := func(p float64) float64 {
		return round(float64(latencies[int(p*float64(len(latencies)-1))])/float64(time.Millisecond), 3)
	}
	r.P50ms, r.P95ms, r.P99ms = pct(0.50), pct(0.95), pct(0.99)
}

// EnqueuePercentiles fills EnqueueP50ms and EnqueueP99ms from enqueue
// times (sorted in place).
func (r *Result) EnqueuePercentiles(enqueued []time.Duration) {
	var e Result
	e.Percentiles(enqueued)
	r.EnqueueP50ms, r.EnqueueP99ms = e.P50ms, e.P99ms
}

func round(v float64, digits int) float64 {
	p := 1.0
	for range digits {
		p *= 10
	}
	return float64(int64(v*p+0.5)) / p
}
