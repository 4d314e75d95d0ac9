package main

// pg-steady-pinned and pg-steady-idle-tx (issue 23): the steady workload
// while another session holds back PostgreSQL's xmin horizon, so vacuum
// (auto or HOT pruning) can remove none of the dead row versions the run's
// fetches and completions leave behind.

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/twicejobs/twice/bench"
)

// pinKind is how the other session holds the horizon back.
type pinKind int

const (
	// pinSnapshot: BEGIN ISOLATION LEVEL REPEATABLE READ, one SELECT (which
	// takes the snapshot), then idle until the run ends: the session's
	// backend_xmin pins the horizon, as a long report or pg_dump does.
	pinSnapshot pinKind = iota
	// pinIdleTx: BEGIN, one UPDATE, then idle: the session's transaction id
	// (backend_xid) pins the horizon, as an application that forgot to
	// commit does.
	pinIdleTx
)

// pinSchema holds the unrelated table the pinning session reads or writes.
const pinSchema = "compare_pin"

// pinnedWorkload is the steady workload, run with the pin kind says; see
// runPinned.
func (o *options) pinnedWorkload(name string, kind pinKind) workload {
	return workload{name: name, db: "pg",
		cfg:     bench.Config{Mode: bench.ModeSteady, Strategy: "none", Duration: o.duration, Workers: o.workers},
		systems: []string{"twice", "river"},
		run: func(ctx context.Context, o *options, w workload) ([]string, error) {
			return o.runPinned(ctx, w, kind)
		}}
}

// pin is the open session holding the horizon back.
type pin struct {
	conn *pgx.Conn
	pid  uint32
}

// openPin creates the unrelated table if needed and opens the session kind
// describes on it, left idle in its transaction.
func (o *options) openPin(ctx context.Context, kind pinKind) (*pin, error) {
	if err := execAll(ctx, o.pg,
		`CREATE SCHEMA IF NOT EXISTS `+pinSchema,
		`CREATE TABLE IF NOT EXISTS `+pinSchema+`.anchor (id int PRIMARY KEY, n bigint NOT NULL)`,
		`INSERT INTO `+pinSchema+`.anchor VALUES (1, 0) ON CONFLICT DO NOTHING`); err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, o.pg)
	if err != nil {
		return nil, err
	}
	stmts := []string{`BEGIN ISOLATION LEVEL REPEATABLE READ`, `SELECT count(*) FROM ` + pinSchema + `.anchor`}
	if kind == pinIdleTx {
		stmts = []string{`BEGIN`, `UPDATE ` + pinSchema + `.anchor SET n = n + 1 WHERE id = 1`}
	}
	for _, q := range stmts {
		if _, err := conn.Exec(ctx, q); err != nil {
			_ = conn.Close(ctx)
			return nil, fmt.Errorf("pin: %s: %w", q, err)
		}
	}
	return &pin{conn: conn, pid: conn.PgConn().PID()}, nil
}

// holding reports, from another session, what the pin looks like to the
// server: its state and the xmin or xid that holds the horizon back.
func (o *options) holding(ctx context.Context, p *pin) string {
	conn, err := pgx.Connect(ctx, o.pg)
	if err != nil {
		return err.Error()
	}
	defer func() { _ = conn.Close(ctx) }()
	var state, xmin, xid string
	if err := conn.QueryRow(ctx, `SELECT state, coalesce(backend_xmin::text, '-'), coalesce(backend_xid::text, '-')
		FROM pg_stat_activity WHERE pid = $1`, p.pid).Scan(&state, &xmin, &xid); err != nil {
		return "holder not found: " + err.Error()
	}
	return fmt.Sprintf("holder %q xmin %s xid %s", state, xmin, xid)
}

// close rolls the pin's transaction back and ends the session.
func (p *pin) close(ctx context.Context) error {
	_, err := p.conn.Exec(ctx, `ROLLBACK`)
	if cerr := p.conn.Close(ctx); err == nil {
		err = cerr
	}
	return err
}

// runPinned runs w on each system with the pin open from before the child
// starts (before it even empties the table) until after its dead tuples
// are read, and, unless pg-steady (or the other pinned workload) ran
// already in this invocation (whose results it then reuses), the
// unpinned steady run by run too, for each system's ratio
// pinned/unpinned.
func (o *options) runPinned(ctx context.Context, w workload, kind pinKind) ([]string, error) {
	base, baseDead := o.unpinned, o.unpinnedDead
	needBase := base == nil
	if needBase {
		base, baseDead = map[string][]*bench.Result{}, map[string][]int64{}
	}
	pinned, dead := map[string][]*bench.Result{}, map[string][]int64{}
	line := func(name string, run int, sys string, res *bench.Result, d int64, note string) {
		fmt.Printf("%-24s run %d %-10s %9.0f jobs/s %7d jobs %7.2fs fetch-to-start p99 %7.2fms n_dead_tup %9d rss %6.1fMB %s\n",
			name, run, sys, res.JobsPerS, res.Jobs, res.Seconds, res.P99ms, d, res.MaxRSSMB, note)
	}
	for i := range o.runs {
		for _, sys := range rotated(w.systems, i) {
			// The unpinned and the pinned run alternate too.
			sides := []string{"unpinned", "pinned"}
			if !needBase {
				sides = sides[1:]
			}
			for _, side := range rotated(sides, i) {
				if side == "unpinned" {
					res, err := o.spawnRun(ctx, "pg-steady", sys, i+1)
					if err != nil {
						return nil, fmt.Errorf("unpinned run %d %s: %w", i+1, sys, err)
					}
					d, err := o.deadTuples(ctx, sys)
					if err != nil {
						return nil, err
					}
					base[sys], baseDead[sys] = append(base[sys], res), append(baseDead[sys], d)
					line("pg-steady (unpinned)", i+1, sys, res, d, "")
					continue
				}
				res, d, note, err := o.pinnedRun(ctx, w.name, sys, i+1, kind)
				if err != nil {
					return nil, fmt.Errorf("run %d %s: %w", i+1, sys, err)
				}
				pinned[sys], dead[sys] = append(pinned[sys], res), append(dead[sys], d)
				line(w.name, i+1, sys, res, d, note)
			}
		}
	}
	if needBase {
		o.unpinned, o.unpinnedDead = base, baseDead
	}
	a, b := w.systems[0], w.systems[1]
	ta, tb := medianOf(pinned[a], jobsPerS), medianOf(pinned[b], jobsPerS)
	lines := []string{fmt.Sprintf("%-24s %s %.0f jobs/s, %s %.0f jobs/s: ratio %.2f", w.name, a, ta, b, tb, ta/tb)}
	for _, sys := range w.systems {
		t, u := medianOf(pinned[sys], jobsPerS), medianOf(base[sys], jobsPerS)
		unpinnedDead := "not read (pg-steady's runs, reused, do not read it)"
		if len(baseDead[sys]) > 0 {
			unpinnedDead = fmt.Sprintf("%.0f", medianInt(baseDead[sys]))
		}
		lines = append(lines, fmt.Sprintf("%-24s %s pinned/unpinned %.2f (unpinned %.0f jobs/s); n_dead_tup of %s at the end: pinned %.0f, unpinned %s",
			"", sys, t/u, u, tableName(sys), medianInt(dead[sys]), unpinnedDead))
	}
	for _, sys := range w.systems {
		lines = append(lines, fmt.Sprintf("%-24s %s p99 fetch-to-start (from the fetch that leased a job to its handler's start): pinned %.2f ms, unpinned %.2f ms",
			"", sys, medianOf(pinned[sys], p99), medianOf(base[sys], p99)))
	}
	return lines, nil
}

// pinnedRun opens the pin, runs one child, reads the dead tuples while the
// pin still holds, then rolls the pin back.
func (o *options) pinnedRun(ctx context.Context, name, sys string, run int, kind pinKind) (*bench.Result, int64, string, error) {
	p, err := o.openPin(ctx, kind)
	if err != nil {
		return nil, 0, "", err
	}
	res, err := o.spawnRun(ctx, name, sys, run)
	var (
		d    int64
		note string
	)
	if err == nil {
		note = o.holding(ctx, p)
		d, err = o.deadTuples(ctx, sys)
	}
	if cerr := p.close(context.WithoutCancel(ctx)); err == nil && cerr != nil {
		err = fmt.Errorf("roll the pin back: %w", cerr)
	}
	if err != nil {
		return nil, 0, "", err
	}
	return res, d, note, nil
}

// tableName is system's hot table, schema-qualified.
func tableName(system string) string {
	s, t := hotTable(system)
	return s + "." + t
}
