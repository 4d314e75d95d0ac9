package main

// pg-backlog-growth (issue 23): a burn-down's fetch throughput with
// -backlog-rows jobs waiting in the table against backlogBaseline.
//
// The waiting jobs are available and due, in another queue (backlogQueue)
// that no worker listens on: the state and form each system stores work
// that waits for a worker in, so they are entries of the very index the
// fetch descends (twice's partial twice_jobs_fetch (queue, priority, run_at,
// id) WHERE state = 'available'; River's river_job_prioritized_fetching_index
// (state, queue, priority, scheduled_at, id)), next to the fetched queue's
// range but outside it. Jobs scheduled in the future would not do the same
// on both sides: River stores them as state 'scheduled', a part of its index
// its fetch never reads (its scheduler moves them when due), while twice
// keeps them 'available' in the fetched queue's range, just past the due
// jobs.

import (
	"context"
	"fmt"

	"github.com/twicejobs/twice/bench"
	"github.com/twicejobs/twice/twicepg"
)

const (
	// backlogBaseline is pg-backlog-growth's small side: waiting jobs
	// already in the table.
	backlogBaseline = 100_000
	// backlogQueue is the queue the waiting jobs wait in.
	backlogQueue = "backlog"
)

// backlogWorkload is the burn-down of -jobs jobs, run by each system with
// backlogBaseline and with -backlog-rows waiting jobs.
func (o *options) backlogWorkload() workload {
	return workload{name: "pg-backlog-growth", db: "pg",
		cfg:     bench.Config{Mode: bench.ModeBurndown, Strategy: "none", Jobs: o.jobs, Workers: o.workers},
		systems: []string{"twice", "river"},
		run: func(ctx context.Context, o *options, w workload) ([]string, error) {
			return o.runBacklog(ctx, w)
		},
		child: func(ctx context.Context, o *options) (*bench.Result, error) {
			return o.backlogChild(ctx)
		},
	}
}

// runBacklog runs each system with both backlogs, alternating the systems
// and the backlogs run by run.
func (o *options) runBacklog(ctx context.Context, w workload) ([]string, error) {
	sizes := []int{backlogBaseline, o.backlogRows}
	results := map[string]map[int][]*bench.Result{}
	for _, sys := range w.systems {
		results[sys] = map[int][]*bench.Result{}
	}
	for i := range o.runs {
		for _, sys := range rotated(w.systems, i) {
			for _, n := range rotated(sizes, i) {
				res, err := o.spawnRun(ctx, w.name, sys, i+1, "-backlog-rows", fmt.Sprint(n))
				if err != nil {
					return nil, fmt.Errorf("run %d %s with %d waiting: %w", i+1, sys, n, err)
				}
				results[sys][n] = append(results[sys][n], res)
				fmt.Printf("%-24s run %d %-10s %9d waiting %9.0f jobs/s %7d jobs %7.2fs rss %6.1fMB\n",
					w.name, i+1, sys, n, res.JobsPerS, res.Jobs, res.Seconds, res.MaxRSSMB)
			}
		}
	}
	var lines []string
	for _, sys := range w.systems {
		small, large := medianOf(results[sys][sizes[0]], jobsPerS), medianOf(results[sys][sizes[1]], jobsPerS)
		lines = append(lines, fmt.Sprintf("%-24s %s %d waiting %.0f jobs/s, %d waiting %.0f jobs/s: large/baseline %.2f",
			w.name, sys, sizes[0], small, sizes[1], large, large/small))
	}
	a, b := w.systems[0], w.systems[1]
	for _, n := range sizes {
		ta, tb := medianOf(results[a][n], jobsPerS), medianOf(results[b][n], jobsPerS)
		lines = append(lines, fmt.Sprintf("%-24s %d waiting: %s/%s %.2f", "", n, a, b, ta/tb))
	}
	return lines, nil
}

// backlogChild fills -backlog-rows waiting jobs, in the system's own form,
// into an emptied table, vacuums, checkpoints, and runs the burn-down.
func (o *options) backlogChild(ctx context.Context) (*bench.Result, error) {
	cfg := bench.Config{Mode: bench.ModeBurndown, Strategy: "none", Jobs: o.jobs, Workers: o.workers}
	switch o.system {
	case "twice":
		u, err := o.schemaURL(twiceSchema)
		if err != nil {
			return nil, err
		}
		store, err := twicepg.Open(ctx, u) // migrates
		if err != nil {
			return nil, err
		}
		defer func() { _ = store.Close() }()
		// As EnqueueMany stores a job: available, attempt and epoch 0,
		// due at once; the message and idempotency ids are random, as
		// prepareTwice's finished rows.
		if err := execAll(ctx, u,
			`TRUNCATE twice_jobs, twice_markers, twice_nodes`,
			fmt.Sprintf(`INSERT INTO twice_jobs (kind, queue, args, message_id, idempotency_key,
				state, attempt, max_attempts, epoch, run_at, created_at)
				SELECT 'bench.noop.v1', '%s', '{"run":0,"n":0}'::bytea, gen_random_uuid()::text, gen_random_uuid()::text,
					'available', 0, 20, 0, now(), now()
				FROM generate_series(1, %d)`, backlogQueue, o.backlogRows),
			`VACUUM ANALYZE twice_jobs`, `VACUUM ANALYZE twice_markers`, `CHECKPOINT`); err != nil {
			return nil, err
		}
		cfg.Store = store
		return bench.Run(ctx, cfg)
	case "river":
		u, err := o.schemaURL(riverSchema)
		if err != nil {
			return nil, err
		}
		pool, driver, err := openRiver(ctx, u)
		if err != nil {
			return nil, err
		}
		defer pool.Close()
		// As River's InsertMany stores a riverArgs job: available, due
		// now, priority 1, River's default 25 attempts, empty metadata
		// and tags, no unique key.
		if err := execAll(ctx, u,
			`TRUNCATE river_job`,
			fmt.Sprintf(`INSERT INTO river_job (state, attempt, max_attempts, created_at, scheduled_at, priority,
				args, kind, metadata, queue, tags)
				SELECT 'available', 0, 25, now(), now(), 1, '{"run":0,"n":0}'::jsonb, '%s', '{}'::jsonb, '%s', '{}'
				FROM generate_series(1, %d)`, riverArgs{}.Kind(), backlogQueue, o.backlogRows),
			`VACUUM ANALYZE river_job`, `CHECKPOINT`); err != nil {
			return nil, err
		}
		return riverRun(ctx, driver, cfg, o.cooldown)
	}
	return nil, fmt.Errorf("pg-backlog-growth runs twice or river, not %q", o.system)
}
