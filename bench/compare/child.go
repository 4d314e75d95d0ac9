package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/twicejobs/twice/bench"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicesqlite"
)

// The schemas each system works in, in the -pg database.
const (
	twiceSchema = "compare_twice"
	riverSchema = "compare_river"
)

// schemaURL is the -pg URL with the schema and pool size set.
func (o *options) schemaURL(schema string) (string, error) {
	u, err := url.Parse(o.pg)
	if err != nil {
		return "", fmt.Errorf("-pg: %w", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	q.Set("pool_max_conns", fmt.Sprint(o.poolConns))
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func (o *options) createSchemas(ctx context.Context) error {
	pool, err := pgxpool.New(ctx, o.pg)
	if err != nil {
		return err
	}
	defer pool.Close()
	for _, s := range []string{twiceSchema, riverSchema} {
		if _, err := pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+s); err != nil {
			return fmt.Errorf("create schema %s: %w", s, err)
		}
	}
	return nil
}

// pgSettings reports the server settings that move the results most.
func pgSettings(ctx context.Context, pg string) string {
	pool, err := pgxpool.New(ctx, pg)
	if err != nil {
		return err.Error()
	}
	defer pool.Close()
	var parts []string
	var version string
	if err := pool.QueryRow(ctx, `SHOW server_version`).Scan(&version); err == nil {
		parts = append(parts, "PostgreSQL "+version)
	}
	for _, name := range []string{"shared_buffers", "synchronous_commit", "fsync", "wal_level", "max_connections", "work_mem", "autovacuum"} {
		var v string
		if err := pool.QueryRow(ctx, `SHOW `+name).Scan(&v); err == nil {
			parts = append(parts, name+"="+v)
		}
	}
	return strings.Join(parts, " ")
}

func (o *options) runChild(ctx context.Context) error {
	var w *workload
	for _, c := range o.workloads() {
		if c.name == o.workload {
			w = &c
			break
		}
	}
	if w == nil {
		return fmt.Errorf("unknown workload %q", o.workload)
	}
	stopProfile, err := o.startCPUProfile()
	if err != nil {
		return err
	}
	defer stopProfile()
	var res *bench.Result
	switch {
	case w.child != nil:
		res, err = w.child(ctx, o)
	case w.db == "sqlite":
		dir, derr := os.MkdirTemp("", "twice-compare-")
		if derr != nil {
			return derr
		}
		defer func() { _ = os.RemoveAll(dir) }()
		path := filepath.Join(dir, "bench.db")
		if o.system == "river" {
			res, err = riverSQLite(ctx, path, w.cfg, o.cooldown)
		} else {
			res, err = twiceSQLite(ctx, path, w.cfg)
		}
	case o.system == "river":
		u, uerr := o.schemaURL(riverSchema)
		if uerr != nil {
			return uerr
		}
		res, err = riverPG(ctx, u, w.cfg, o.cooldown)
	case o.system == "ceiling":
		u, uerr := o.schemaURL(twiceSchema)
		if uerr != nil {
			return uerr
		}
		res, err = ceilingPG(ctx, u, w.cfg)
	default:
		u, uerr := o.schemaURL(twiceSchema)
		if uerr != nil {
			return uerr
		}
		rows := 0
		if o.system == "twice-full" {
			rows = w.finishedRows
		}
		res, err = twicePG(ctx, u, w.cfg, rows)
	}
	if err != nil {
		return err
	}
	res.System, res.MaxRSSMB = o.system, bench.MaxRSSMB()
	line, err := json.Marshal(res)
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	return nil
}

// twicePG empties twice's tables, fills in finishedRows completed jobs,
// vacuums, and runs the workload.
func twicePG(ctx context.Context, u string, cfg bench.Config, finishedRows int) (*bench.Result, error) {
	store, err := twicepg.Open(ctx, u)
	if err != nil {
		return nil, err
	}
	defer func() { _ = store.Close() }()
	if err := prepareTwice(ctx, u, finishedRows); err != nil {
		return nil, err
	}
	cfg.Store = store
	stopTrace, err := startTrace()
	if err != nil {
		return nil, err
	}
	defer stopTrace()
	return bench.Run(ctx, cfg)
}

// prepareTwice empties twice's tables in the schema u names (migrated
// already), fills in finishedRows completed jobs and vacuums, so every run
// of twice and of the ceiling starts from the same table.
func prepareTwice(ctx context.Context, u string, finishedRows int) error {
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		return err
	}
	defer pool.Close()
	stmts := []string{`TRUNCATE twice_jobs, twice_markers, twice_nodes`}
	if finishedRows > 0 {
		// Finished an hour ago: history, not yet due for retention.
		stmts = append(stmts, fmt.Sprintf(`INSERT INTO twice_jobs (kind, queue, args, message_id, idempotency_key,
			state, attempt, max_attempts, epoch, run_at, created_at, finished_at)
			SELECT 'bench.noop.v1', 'default', '{"run":0,"n":0}'::bytea, gen_random_uuid()::text, gen_random_uuid()::text,
				'completed', 1, 20, 1, now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour'
			FROM generate_series(1, %d)`, finishedRows))
	}
	// The checkpoint writes out what preparing dirtied (millions of rows,
	// for growth), so that I/O does not land in the measured run.
	stmts = append(stmts, `VACUUM ANALYZE twice_jobs`, `VACUUM ANALYZE twice_markers`, `CHECKPOINT`)
	for _, q := range stmts {
		if _, err := pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("prepare: %s: %w", strings.Fields(q)[0], err)
		}
	}
	return nil
}

func twiceSQLite(ctx context.Context, path string, cfg bench.Config) (*bench.Result, error) {
	store, err := twicesqlite.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = store.Close() }()
	cfg.Store = store
	stopTrace, err := startTrace()
	if err != nil {
		return nil, err
	}
	defer stopTrace()
	return bench.Run(ctx, cfg)
}
