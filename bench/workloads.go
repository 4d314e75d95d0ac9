package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twicejobs/twice"
)

// Args is the bench's no-op job. Run tells this run's jobs from those an
// interrupted run left behind; At is the enqueue time in Unix nanoseconds,
// for the latency mode.
type Args struct {
	Run int64 `json:"run"`
	N   int64 `json:"n"`
	At  int64 `json:"at,omitempty"`
}

// Kind names the bench's job kind.
func (Args) Kind() string { return "bench.noop.v1" }

// waitTimeout bounds how long a run waits for the jobs it counts on.
const waitTimeout = 15 * time.Minute

type runner struct {
	cfg      Config
	runID    int64
	strategy twice.Strategy

	started atomic.Int64 // this run's jobs whose handler ran

	// mu guards what the handlers and the run share: the latencies, and
	// all, closed when started reaches target (0: never).
	mu        sync.Mutex
	target    int64
	all       chan struct{}
	latencies []time.Duration
	// enqueued are the latency mode's enqueue times: from the job's At
	// to its Enqueue's return (the commit), the part of a latency that
	// is the enqueue's and not the worker's.
	enqueued []time.Duration
}

// expect makes all close once n of this run's jobs have started, and
// returns it.
func (r *runner) expect(n int64) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.target, r.all = n, make(chan struct{})
	if r.started.Load() >= n {
		close(r.all)
	}
	return r.all
}

// client returns a client working the bench kind with cfg.Workers slots.
func (r *runner) client() (*twice.Client, error) {
	reg := twice.NewRegistry()
	err := twice.Register(reg, twice.HandlerFunc[Args](func(_ context.Context, job *twice.Job[Args]) error {
		if job.Args.Run != r.runID {
			return nil
		}
		var lat time.Duration
		if job.Args.At != 0 {
			lat = time.Since(time.Unix(0, job.Args.At))
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if lat != 0 {
			r.latencies = append(r.latencies, lat)
		}
		if r.started.Add(1) == r.target {
			close(r.all)
		}
		return nil
	}), &twice.KindOpts{Strategy: r.strategy})
	if err == nil {
		err = r.registerWait(reg)
	}
	if err != nil {
		return nil, err
	}
	return twice.NewClient(r.cfg.Store, twice.Config{
		Registry:        reg,
		Queues:          []twice.QueueConfig{{Name: twice.QueueDefault, Concurrency: r.cfg.Workers}},
		MaxWorkers:      r.cfg.Workers,
		FetchLimit:      r.cfg.FetchLimit,
		Logger:          r.cfg.Logger,
		Observer:        r.observer(),
		Tracer:          r.cfg.Tracer,
		EnqueueMetadata: r.cfg.EnqueueMetadata,
	})
}

// observer is the client's Observer: the run's own, and in the steady
// mode one that records each start's fetch-to-start time as a latency.
func (r *runner) observer() twice.Observer {
	if r.cfg.Mode != ModeSteady {
		return r.cfg.Observer
	}
	return twice.ObserverFunc(func(e twice.Event) {
		if e.Type == twice.EventStarted && e.Kind == (Args{}).Kind() {
			r.mu.Lock()
			r.latencies = append(r.latencies, e.SinceFetch)
			r.mu.Unlock()
		}
		if r.cfg.Observer != nil {
			r.cfg.Observer.Observe(e)
		}
	})
}

// insert enqueues n jobs of this run in batches.
func (r *runner) insert(ctx context.Context, c *twice.Client, from, n int) error {
	batch := make([]twice.EnqueueParams, 0, insertBatch)
	for i := from; i < from+n; i++ {
		batch = append(batch, twice.EnqueueParams{Args: Args{Run: r.runID, N: int64(i)}})
		if len(batch) == cap(batch) || i == from+n-1 {
			if _, err := c.EnqueueMany(ctx, batch); err != nil {
				return fmt.Errorf("insert bench jobs: %w", err)
			}
			batch = batch[:0]
		}
	}
	return nil
}

// progress prints a line every second until ctx is done.
func (r *runner) progress(ctx context.Context, line func(elapsed time.Duration) string) func() {
	if r.cfg.Progress == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		t0 := time.Now()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				fmt.Fprintf(r.cfg.Progress, "bench %s: %s\n", r.cfg.Mode, line(time.Since(t0)))
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}

// wait waits for all, as expect returned it.
func (r *runner) wait(ctx context.Context, all chan struct{}, what string) error {
	select {
	case <-all:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(waitTimeout):
		return fmt.Errorf("only %d %s after %s", r.started.Load(), what, waitTimeout)
	}
}

// burndown inserts the jobs, then times the worker from its start until
// every outcome is written (Stop flushes the completer).
func (r *runner) burndown(ctx context.Context) (*Result, error) {
	n := r.cfg.Jobs
	all := r.expect(int64(n))
	c, err := r.client()
	if err != nil {
		return nil, err
	}
	stop := r.progress(ctx, func(time.Duration) string { return fmt.Sprintf("inserting %d jobs", n) })
	err = r.insert(ctx, c, 0, n)
	stop()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	stop = r.progress(ctx, func(el time.Duration) string {
		done := r.started.Load()
		return fmt.Sprintf("%d/%d jobs, %.0f jobs/s", done, n, float64(done)/el.Seconds())
	})
	defer stop()
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	werr := r.wait(ctx, all, fmt.Sprintf("of %d jobs ran", n))
	serr := c.Stop(context.WithoutCancel(ctx))
	if err := errors.Join(werr, serr); err != nil {
		return nil, err
	}
	return &Result{Jobs: n, Seconds: round(time.Since(t0).Seconds(), 3)}, nil
}

// steady keeps a backlog in the queue while the worker works it, and
// counts the jobs started during Duration.
func (r *runner) steady(ctx context.Context) (*Result, error) {
	backlog := max(5000, 20*r.cfg.Workers)
	c, err := r.client()
	if err != nil {
		return nil, err
	}
	if err := r.insert(ctx, c, 0, backlog); err != nil {
		return nil, err
	}
	inserted := backlog
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = c.Stop(context.WithoutCancel(ctx))
		}
	}()
	t0, from := time.Now(), r.started.Load()
	stop := r.progress(ctx, func(el time.Duration) string {
		done := r.started.Load() - from
		return fmt.Sprintf("%d jobs in %s, %.0f jobs/s", done, el.Truncate(time.Second), float64(done)/el.Seconds())
	})
	defer stop()
	end := time.NewTimer(r.cfg.Duration)
	defer end.Stop()
	check := time.NewTicker(5 * time.Millisecond)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-end.C:
			done := r.started.Load() - from
			elapsed := time.Since(t0)
			stopped = true
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := c.Stop(sctx); err != nil {
				return nil, err
			}
			res := &Result{Jobs: int(done), Seconds: round(elapsed.Seconds(), 3)}
			r.mu.Lock()
			res.Percentiles(r.latencies)
			r.mu.Unlock()
			return res, nil
		case <-check.C:
		}
		if inserted-int(r.started.Load()) < backlog {
			if err := r.insert(ctx, c, inserted, insertBatch); err != nil {
				return nil, err
			}
			inserted += insertBatch
		}
	}
}

// latency enqueues one job at a time at Rate a second for Duration and
// waits for each to start; the handler records its enqueue-to-start time.
func (r *runner) latency(ctx context.Context) (*Result, error) {
	c, err := r.client()
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	defer func() { _ = c.Stop(context.WithoutCancel(ctx)) }()
	// One job first, untimed: the worker is fetching (and listening).
	all := r.expect(1)
	if _, err := c.Enqueue(ctx, Args{Run: r.runID, N: -1}, nil); err != nil {
		return nil, err
	}
	if err := r.wait(ctx, all, "warm-up jobs started"); err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.latencies = r.latencies[:0]
	r.mu.Unlock()

	var sent atomic.Int64
	stop := r.progress(ctx, func(el time.Duration) string {
		return fmt.Sprintf("%d jobs enqueued in %s", sent.Load(), el.Truncate(time.Second))
	})
	defer stop()
	// Each enqueue runs on its own goroutine, so a slow commit does not
	// lower the rate: the rate is the arrival rate of jobs.
	var (
		wg   sync.WaitGroup
		errs = make(chan error, 1)
	)
	t0 := time.Now()
	tick := time.NewTicker(time.Second / time.Duration(r.cfg.Rate))
	end := time.NewTimer(r.cfg.Duration)
	for run := true; run; {
		select {
		case <-ctx.Done():
			run = false
			continue
		case <-end.C:
			run = false
			continue
		case err := <-errs:
			tick.Stop()
			wg.Wait()
			return nil, err
		case <-tick.C:
		}
		n := sent.Add(1)
		wg.Go(func() {
			at := time.Now()
			if _, err := c.Enqueue(ctx, Args{Run: r.runID, N: n, At: at.UnixNano()}, nil); err != nil {
				select {
				case errs <- err:
				default:
				}
				return
			}
			d := time.Since(at)
			r.mu.Lock()
			r.enqueued = append(r.enqueued, d)
			r.mu.Unlock()
		})
	}
	tick.Stop()
	wg.Wait()
	elapsed := time.Since(t0)
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The warm-up job counted as one.
	if err := r.wait(ctx, r.expect(sent.Load()+1), fmt.Sprintf("of %d jobs started", sent.Load())); err != nil {
		return nil, err
	}
	res := &Result{Jobs: int(sent.Load()), Seconds: round(elapsed.Seconds(), 3)}
	r.mu.Lock()
	res.Percentiles(r.latencies)
	res.EnqueuePercentiles(r.enqueued)
	r.mu.Unlock()
	return res, nil
}
