package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/twicejobs/twice/bench"
)

// profiling holds the flags that say where a run's time goes (issue 15
// item 4): a CPU profile of each child and the server's statement
// statistics of each run.
type profiling struct {
	cpuProfile string // directory the children write their CPU profiles to
	pgStat     bool   // reset pg_stat_statements before each run, print the top statements after it
	pgStatTop  int
	run        int // child mode: which run this is, for the profile's file name
	writes     pgWrites
}

// pgStatTopDefault is how many statements -pgstat prints per run.
const pgStatTopDefault = 8

func (p *profiling) flags() {
	flag.StringVar(&p.cpuProfile, "cpuprofile", "", "directory each child writes a CPU profile to, as <workload>-<system>-run<N>.pprof (read it with `go tool pprof -top`; the untimed insert is in it too: add -ignore 'EnqueueMany' to leave it out)")
	flag.BoolVar(&p.pgStat, "pgstat", false, "reset pg_stat_statements for the -pg database before each run and print its top statements by total time after it (the extension must be in shared_preload_libraries; on a shared server give the bench a database of its own, as the statistics are per database)")
	flag.IntVar(&p.pgStatTop, "pgstat-top", pgStatTopDefault, "statements -pgstat prints per run")
	flag.IntVar(&p.run, "run", 0, "internal: the run's number, for the CPU profile's file name")
	p.writes.flags()
}

// spawnProfiled runs spawn with the profiling flags passed on, around it
// the -pgstat reset and report, and after it the child's CPU time (from
// the parent's rusage of its waited children) and the server's, so a run's
// wall time splits into the twice process, PostgreSQL and waiting.
func (o *options) spawnProfiled(ctx context.Context, workload, system string, run int) (res *bench.Result, err error) {
	var extra []string
	if o.cpuProfile != "" {
		extra = append(extra, "-cpuprofile", o.cpuProfile, "-run", strconv.Itoa(run))
	}
	if o.writes.on {
		schema := twiceSchema
		if system == "river" {
			schema = riverSchema
		}
		before, err := snapshotWrites(ctx, o.pg, schema)
		if err != nil {
			return nil, fmt.Errorf("-pgwrites: %w", err)
		}
		defer func() {
			if res == nil {
				return
			}
			after, err := snapshotWrites(ctx, o.pg, schema)
			if err != nil {
				fmt.Println("  -pgwrites:", err)
				return
			}
			o.writes.report(before, after, res.Jobs)
		}()
	}
	if !o.pgStat {
		return o.spawn(ctx, workload, system, extra...)
	}
	stat := o.pgStatReset(ctx)
	t0, before, server0 := time.Now(), childrenCPU(), postgresCPU()
	res, err = o.spawn(ctx, workload, system, extra...)
	if err != nil {
		return nil, err
	}
	wall, child, server := time.Since(t0).Seconds(), childrenCPU()-before, postgresCPU()-server0
	fmt.Printf("  %s run %d %s: wall %.2fs (the timed part %.2fs); CPU: this child %.2fs (%.0f%% of one core over its wall), PostgreSQL %.2fs (all its processes, other clients' too)\n",
		workload, run, system, wall, res.Seconds, child.Seconds(), 100*child.Seconds()/wall, server.Seconds())
	if stat != nil {
		stat(ctx)
	}
	return res, nil
}

// startCPUProfile starts the child's CPU profile if -cpuprofile names a
// directory, and returns what stops it.
func (o *options) startCPUProfile() (func(), error) {
	if o.cpuProfile == "" {
		return func() {}, nil
	}
	if err := os.MkdirAll(o.cpuProfile, 0o755); err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	name := filepath.Join(o.cpuProfile, fmt.Sprintf("%s-%s-run%d.pprof", o.workload, o.system, o.run))
	f, err := os.Create(name)
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "compare child: write", name+":", err)
		}
	}, nil
}

// pgStatReset resets pg_stat_statements for the -pg database and returns
// the function that prints the top statements since, or nil (after saying
// how to load the extension) when the server has not loaded it.
func (o *options) pgStatReset(ctx context.Context) func(context.Context) {
	conn, err := pgx.Connect(ctx, o.pg)
	if err != nil {
		fmt.Println("  -pgstat:", err)
		return nil
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		fmt.Println("  -pgstat: CREATE EXTENSION pg_stat_statements:", err)
		return nil
	}
	// Only this database's statistics: other databases on the server are
	// other people's.
	_, err = conn.Exec(ctx, `SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = current_database()), 0)`)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "55000" {
		fmt.Println("  -pgstat: pg_stat_statements is not loaded; add it to the server's shared_preload_libraries " +
			"(ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements', then restart PostgreSQL); going on without it")
		o.pgStat = false
		return nil
	}
	if err != nil {
		fmt.Println("  -pgstat: reset:", err)
		return nil
	}
	return o.pgStatPrint
}

// pgStatPrint prints the top statements of the -pg database by total
// execution time: calls, mean, rows, and each one's share of the total.
// Execution time is the server's time inside the statement (CPU and
// waits), not the commit's fsync after it.
func (o *options) pgStatPrint(ctx context.Context) {
	conn, err := pgx.Connect(ctx, o.pg)
	if err != nil {
		fmt.Println("  -pgstat:", err)
		return
	}
	defer func() { _ = conn.Close(ctx) }()
	rows, err := conn.Query(ctx, `SELECT query, calls, total_exec_time, mean_exec_time, rows,
			sum(total_exec_time) OVER () AS allTimetime
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND query NOT LIKE '%pg_stat_statements%'
		ORDER BY total_exec_time DESC LIMIT $1`, o.pgStatTop)
	if err != nil {
		fmt.Println("  -pgstat:", err)
		return
	}
	defer rows.Close()
	first := true
	for rows.Next() {
		var (
			query                string
			calls, n             int64
			total, mean, allTime float64
		)
		if err := rows.Scan(&query, &calls, &total, &mean, &n, &allTime); err != nil {
			fmt.Println("  -pgstat:", err)
			return
		}
		if first {
			fmt.Printf("  pg_stat_statements: %.2fs in all statements; top by total time:\n", allTime/1000)
			first = false
		}
		fmt.Printf("    %5.1f%% %8.2fs %8d calls %8.3fms mean %9d rows  %s\n",
			100*total/allTime, total/1000, calls, mean, n, oneLine(query, 110))
	}
	if err := rows.Err(); err != nil {
		fmt.Println("  -pgstat:", err)
	}
}

// oneLine squeezes a statement's whitespace and cuts it to at most n bytes.
func oneLine(q string, n int) string {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > n {
		q = q[:n] + "…"
	}
	return q
}

// childrenCPU is the user and system CPU time of this process's waited
// children so far.
func childrenCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// postgresCPU is the CPU time a local PostgreSQL server has used so far:
// the postmaster's own and its waited (exited) children's, which is every
// backend a finished run used, plus its live children's. It reads /proc,
// so it is 0 off Linux or with a server on another machine; other clients
// of the server count too.
func postgresCPU() time.Duration {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	type proc struct {
		ppid          int
		own, children int64 // utime+stime and cutime+cstime, in clock ticks
	}
	procs := map[int]proc{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil || !strings.Contains(string(b), "(postgres)") {
			continue
		}
		// The fields after the command's closing parenthesis: state ppid
		// ... utime(14) stime(15) cutime(16) cstime(17), numbered from 1
		// for pid.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 15 {
			continue
		}
		num := func(i int) int64 { v, _ := strconv.ParseInt(f[i-3], 10, 64); return v }
		procs[pid] = proc{ppid: int(num(4)), own: num(14) + num(15), children: num(16) + num(17)}
	}
	var ticks int64
	for _, p := range procs {
		ticks += p.own
		if _, isBackend := procs[p.ppid]; !isBackend {
			ticks += p.children // the postmaster: its exited backends
		}
	}
	// Linux reports these in USER_HZ, 100 a second on every architecture Go
	// builds for.
	return time.Duration(ticks) * (time.Second / 100)
}
