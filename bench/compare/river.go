package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/twicejobs/twice/bench"
	"github.com/twicejobs/twice/twicesqlite"
)

// riverArgs is the River side's no-op job, the same payload as twice's.
type riverArgs struct {
	Run int64 `json:"run"`
	N   int64 `json:"n"`
	At  int64 `json:"at,omitempty"`
}

func (riverArgs) Kind() string { return "bench_noop" }

// riverWorker counts started jobs and records latencies, like the twice
// bench's handler.
type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	started atomic.Int64
	mu      sync.Mutex
	target  int64
	all     chan struct{}
	lat     []time.Duration
	// fetchToStart makes Work record, for a job without At, the time
	// since its attempt's fetch (River sets AttemptedAt in the fetch's
	// statement), as the twice bench's steady mode records SinceFetch.
	fetchToStart bool
}

func (w *riverWorker) expect(n int64) chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.target, w.all = n, make(chan struct{})
	if w.started.Load() >= n {
		close(w.all)
	}
	return w.all
}

func (w *riverWorker) Work(_ context.Context, job *river.Job[riverArgs]) error {
	var lat time.Duration
	switch {
	case job.Args.At != 0:
		lat = time.Since(time.Unix(0, job.Args.At))
	case w.fetchToStart && job.AttemptedAt != nil:
		lat = max(time.Since(*job.AttemptedAt), time.Nanosecond)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if lat != 0 {
		w.lat = append(w.lat, lat)
	}
	if w.started.Add(1) == w.target {
		close(w.all)
	}
	return nil
}

// riverRun runs one workload on River with the same shape as bench.Run.
func riverRun[TTx any](ctx context.Context, driver riverdriver.Driver[TTx], cfg bench.Config, cooldown time.Duration) (*bench.Result, error) {
	w := &riverWorker{fetchToStart: cfg.Mode == bench.ModeSteady}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	client, err := river.NewClient(driver, &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.Workers}},
		Workers: workers,
		// River's own `river bench` settings: its defaults (100ms, 1s)
		// cap a burn-down far lower.
		FetchCooldown:     cooldown,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return nil, err
	}
	// InsertMany, as `river bench` uses, returns the inserted rows, as
	// twice's EnqueueMany does: the same work on both sides.
	insert := func(from, n int) error {
		return inBatches(n, 1000, func(i int) river.InsertManyParams {
			return river.InsertManyParams{Args: riverArgs{Run: 1, N: int64(from + i)}}
		}, func(b []river.InsertManyParams) error {
			_, err := client.InsertMany(ctx, b)
			return err
		})
	}
	res := &bench.Result{System: "river", Mode: cfg.Mode, Strategy: "none"}
	switch cfg.Mode {
	case bench.ModeBurndown:
		all := w.expect(int64(cfg.Jobs))
		if err := insert(0, cfg.Jobs); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if err := client.Start(ctx); err != nil {
			return nil, err
		}
		<-all
		if err := client.Stop(ctx); err != nil {
			return nil, err
		}
		res.Jobs, res.Seconds = cfg.Jobs, time.Since(t0).Seconds()
	case bench.ModeSteady:
		backlog := max(5000, 20*cfg.Workers)
		if err := insert(0, backlog); err != nil {
			return nil, err
		}
		inserted := backlog
		if err := client.Start(ctx); err != nil {
			return nil, err
		}
		t0, from := time.Now(), w.started.Load()
		end := time.After(cfg.Duration)
		check := time.NewTicker(5 * time.Millisecond)
	loop:
		for {
			select {
			case <-end:
				break loop
			case <-check.C:
			}
			if inserted-int(w.started.Load()) < backlog {
				if err := insert(inserted, 1000); err != nil {
					return nil, err
				}
				inserted += 1000
			}
		}
		check.Stop()
		res.Jobs, res.Seconds = int(w.started.Load()-from), time.Since(t0).Seconds()
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := client.Stop(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return nil, err
		}
		w.mu.Lock()
		res.Percentiles(w.lat)
		w.mu.Unlock()
	case bench.ModeLatency:
		if err := client.Start(ctx); err != nil {
			return nil, err
		}
		all := w.expect(1)
		if _, err := client.Insert(ctx, riverArgs{Run: 1, N: -1}, nil); err != nil {
			return nil, err
		}
		<-all
		w.mu.Lock()
		w.lat = w.lat[:0]
		w.mu.Unlock()
		var (
			sent int
			wg   sync.WaitGroup
			errs = make(chan error, 1)
		)
		t0 := time.Now()
		tick := time.NewTicker(time.Second / time.Duration(cfg.Rate))
		end := time.After(cfg.Duration)
	send:
		for {
			select {
			case <-end:
				break send
			case <-tick.C:
			}
			sent++
			n := int64(sent)
			wg.Go(func() {
				if _, err := client.Insert(ctx, riverArgs{Run: 1, N: n, At: time.Now().UnixNano()}, nil); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			})
		}
		tick.Stop()
		wg.Wait()
		select {
		case err := <-errs:
			return nil, err
		default:
		}
		res.Jobs, res.Seconds = sent, time.Since(t0).Seconds()
		<-w.expect(int64(sent) + 1)
		if err := client.Stop(ctx); err != nil {
			return nil, err
		}
		w.mu.Lock()
		res.Percentiles(w.lat)
		w.mu.Unlock()
	}
	if res.Seconds > 0 {
		res.JobsPerS = float64(res.Jobs) / res.Seconds
	}
	return res, nil
}

func riverMigrate[TTx any](ctx context.Context, driver riverdriver.Driver[TTx]) error {
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	return nil
}

// riverPG migrates River's schema, empties its jobs table, vacuums it, and
// runs the workload.
func riverPG(ctx context.Context, url string, cfg bench.Config, cooldown time.Duration) (*bench.Result, error) {
	pool, driver, err := openRiver(ctx, url)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	for _, q := range []string{`TRUNCATE river_job`, `VACUUM ANALYZE river_job`, `CHECKPOINT`} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return nil, fmt.Errorf("%s: %w", q, err)
		}
	}
	return riverRun(ctx, driver, cfg, cooldown)
}

// riverSQLite runs the workload on a new SQLite file.
func riverSQLite(ctx context.Context, path string, cfg bench.Config, cooldown time.Duration) (*bench.Result, error) {
	db, err := sql.Open("sqlite", twicesqlite.DSN(path))
	if err != nil {
		return nil, err
	}
	defer func() { _ = db.Close() }()
	db.SetMaxOpenConns(1) // as riversqlite's documentation asks
	driver := riversqlite.New(db)
	if err := riverMigrate(ctx, driver); err != nil {
		return nil, err
	}
	return riverRun(ctx, driver, cfg, cooldown)
}
