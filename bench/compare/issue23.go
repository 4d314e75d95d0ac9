package main

// Helpers shared by issue 23's workloads (pinned.go, backlog.go, scale.go):
// those run their own loop in the parent (workload.run) instead of runAll's.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/twicejobs/twice/bench"
)

// spawnRun runs one child as spawnProfiled does, with extra flags for it,
// but without -pgstat's report (issue 23's workloads print their own).
func (o *options) spawnRun(ctx context.Context, workload, system string, run int, extra ...string) (*bench.Result, error) {
	if o.cpuProfile != "" {
		extra = append(extra, "-cpuprofile", o.cpuProfile, "-run", strconv.Itoa(run))
	}
	return o.spawn(ctx, workload, system, extra...)
}

// rotated is v (the systems, or the sizes) starting at the i-th, so no
// side always runs on the machine as the previous one left it.
func rotated[T any](v []T, i int) []T {
	k := i % len(v)
	return append(slices.Clone(v[k:]), v[:k]...)
}

// hotTable is the schema-qualified table a system's fetches and
// completions update: twice's live partition (its waiting and running
// jobs, in two generations), River's one jobs table.
func hotTable(system string) (schema, table string) {
	if system == "river" {
		return riverSchema, "river_job"
	}
	return twiceSchema, "twice_jobs_live"
}

// deadTuples reads n_dead_tup of system's hot table from
// pg_stat_user_tables once a child has exited. The server's statistics are
// flushed asynchronously: a backend flushes its pending counts when it
// exits (and, when idle, at most a second or so after its last flush), so
// this waits a second after the child's exit for its backends to have
// flushed, then calls pg_stat_force_next_flush() (which flushes only this
// session's own pending counts, none here, but costs nothing) and reads the
// view in a transaction of its own, so the read is not served from an older
// statistics snapshot.
func (o *options) deadTuples(ctx context.Context, system string) (int64, error) {
	time.Sleep(time.Second)
	conn, err := pgx.Connect(ctx, o.pg)
	if err != nil {
		return 0, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		return 0, fmt.Errorf("pg_stat_force_next_flush (PostgreSQL 15 or later): %w", err)
	}
	schema, table := hotTable(system)
	var n int64
	// Summed over the table's partitions; pg_partition_tree lists nothing
	// for a table that is not partitioned, which is then read itself.
	if err := conn.QueryRow(ctx, `WITH t AS (SELECT format('%I.%I', $1::text, $2::text)::regclass AS rel)
		SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables
		WHERE relid = (SELECT rel FROM t)
			OR relid IN (SELECT relid FROM pg_partition_tree((SELECT rel FROM t)))`,
		schema, table).Scan(&n); err != nil {
		return 0, fmt.Errorf("n_dead_tup of %s.%s: %w", schema, table, err)
	}
	return n, nil
}

// execAll runs statements one by one on the database u names.
func execAll(ctx context.Context, u string, stmts ...string) error {
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		return err
	}
	defer pool.Close()
	for _, q := range stmts {
		if _, err := pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("prepare: %.60s: %w", q, err)
		}
	}
	return nil
}

// medianOf is the median of f over results.
func medianOf(results []*bench.Result, f func(*bench.Result) float64) float64 {
	var v []float64
	for _, r := range results {
		v = append(v, f(r))
	}
	return median(v)
}

// jobsPerS is a result's throughput, for medianOf.
func jobsPerS(r *bench.Result) float64 { return r.JobsPerS }

// p99 is a result's 99th percentile latency, for medianOf.
func p99(r *bench.Result) float64 { return r.P99ms }

// medianInt is the median of v.
func medianInt(v []int64) float64 {
	f := make([]float64, len(v))
	for i, x := range v {
		f[i] = float64(x)
	}
	return median(f)
}
