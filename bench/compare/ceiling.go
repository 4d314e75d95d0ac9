package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/bench"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// The ceiling's shape, as issue 15 measured it: a few loops, each fetching
// a large batch and completing it in one statement.
const (
	ceilingLoops = 4
	ceilingBatch = 1000
	ceilingLease = 5 * time.Minute
)

// ceilingPG is the bare-SQL ceiling of a PostgreSQL burn-down: what twice's
// own statements allow when nothing else runs. It inserts the same jobs as
// the twice side (through twice's EnqueueMany, untimed), then times
// ceilingLoops goroutines that each lease ceilingBatch jobs and complete
// them until none is left.
//
// It calls twicepg's JobFetch and JobFinish, not copies of their SQL: they
// are the exact statements the runtime runs (the ClaimAfter fetch with its
// marker peek, the completion with its marker claims), driven through pgx,
// and a copy would drift from them as the driver changes. What it leaves out
// is the runtime: no handlers, no goroutine per job, no completer batching,
// no lease heartbeats, no wake-ups.
func ceilingPG(ctx context.Context, u string, cfg bench.Config) (*bench.Result, error) {
	if cfg.Mode != bench.ModeBurndown {
		return nil, fmt.Errorf("the ceiling runs burn-downs only, not %s", cfg.Mode)
	}
	strategy, err := twice.ParseStrategy(cfg.Strategy)
	if err != nil {
		return nil, err
	}
	store, err := twicepg.Open(ctx, u)
	if err != nil {
		return nil, err
	}
	defer func() { _ = store.Close() }()
	if err := prepareTwice(ctx, u, 0); err != nil {
		return nil, err
	}
	kind := bench.Args{}.Kind()
	reg := twice.NewRegistry()
	if err := twice.Register(reg, twice.HandlerFunc[bench.Args](func(context.Context, *twice.Job[bench.Args]) error { return nil }),
		&twice.KindOpts{Strategy: strategy}); err != nil {
		return nil, err
	}
	producer, err := twice.NewClient(store, twice.Config{Registry: reg})
	if err != nil {
		return nil, err
	}
	if err := inBatches(cfg.Jobs, ceilingBatch, func(i int) twice.EnqueueParams {
		return twice.EnqueueParams{Args: bench.Args{N: int64(i)}}
	}, func(b []twice.EnqueueParams) error {
		_, err := producer.EnqueueMany(ctx, b)
		return err
	}); err != nil {
		return nil, fmt.Errorf("insert ceiling jobs: %w", err)
	}
	// What a worker does first: the statistics of the generation the jobs
	// entered are refreshed, so the plans read it by its indexes (twicepg's
	// JobRotate). Untimed, as the insert.
	if _, err := store.JobRotate(ctx, &twicestore.JobRotateParams{}); err != nil {
		return nil, err
	}

	var peek map[string]string
	if strategy == twice.ClaimAfter {
		peek = map[string]string{kind: kind} // the handler name defaults to the kind
	}
	t0 := time.Now()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		done int
		errs []error
	)
	for loop := range ceilingLoops {
		wg.Go(func() {
			n, err := ceilingLoop(ctx, store, fmt.Sprintf("ceiling-%d", loop), kind, peek)
			mu.Lock()
			defer mu.Unlock()
			done += n
			errs = append(errs, err)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if done != cfg.Jobs {
		return nil, fmt.Errorf("the ceiling completed %d jobs, want %d", done, cfg.Jobs)
	}
	return &bench.Result{Mode: cfg.Mode, Strategy: cfg.Strategy, Jobs: done, Seconds: time.Since(t0).Seconds(),
		JobsPerS: float64(done) / time.Since(t0).Seconds()}, nil
}

// ceilingLoop leases and completes batches until a fetch finds nothing, and
// returns how many jobs it completed. A ClaimAfter job's completion claims
// its marker, as the runtime's does, unless the fetch's peek found it
// claimed.
func ceilingLoop(ctx context.Context, store *twicepg.Store, node, kind string, peek map[string]string) (int, error) {
	done := 0
	for {
		now := time.Now()
		res, err := store.JobFetch(ctx, &twicestore.JobFetchParams{Queue: twice.QueueDefault, Kinds: []string{kind},
			Limit: ceilingBatch, Node: node, Now: now, LeaseUntil: now.Add(ceilingLease), Peek: peek})
		if err != nil {
			return done, err
		}
		if len(res.Jobs) == 0 {
			return done, nil
		}
		outcomes := make([]*twicestore.JobOutcome, len(res.Jobs))
		finished := time.Now()
		for i, j := range res.Jobs {
			o := &twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted, FinishedAt: finished}
			if peek != nil && !res.Processed[i] {
				o.Marker = &twicestore.MarkerParams{Handler: kind, Key: j.Key, Now: finished}
			}
			outcomes[i] = o
		}
		fin, err := store.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: outcomes})
		if err != nil {
			return done, err
		}
		for _, ok := range fin.Applied {
			if ok {
				done++
			}
		}
	}
}
