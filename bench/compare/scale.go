package main

// pg-scale-nodes (issue 23): one burn-down worked by 1, 2 and 4 worker
// processes of the same system on the same database, as nodes of a fleet.
//
// A first child (-scale-role insert) empties the system's table and
// inserts the -jobs jobs, untimed. Then the parent starts the worker
// children (-scale-role work) at once: each connects, builds its client
// with -workers slots and a pool of -pool-conns (every process the same
// node), prints "ready" and waits on its stdin. Once all are ready the
// parent notes the time and releases them; each starts its client, counts
// the jobs its handler starts, polls until no job is left unfinished, stops
// (flushing its completions) and prints its count. The run's wall time is
// from the parent's release to the last job's completion time as the
// system stored it (twice's finished_at, River's finalized_at): the
// processes poll, so their own exits come later than the last job.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/bench"
	"github.com/twicejobs/twice/twicepg"
)

// scaleRole is, in a pg-scale-nodes child, what it does: insert or work.
var scaleRole = flag.String("scale-role", "", "internal: a pg-scale-nodes child's role, insert or work")

// scaleProcesses are the worker process counts pg-scale-nodes compares.
var scaleProcesses = []int{1, 2, 4}

// scalePoll is how often a worker process checks for unfinished jobs.
const scalePoll = 20 * time.Millisecond

func (o *options) scaleWorkload() workload {
	return workload{name: "pg-scale-nodes", db: "pg",
		cfg:     bench.Config{Mode: bench.ModeBurndown, Strategy: "none", Jobs: o.jobs, Workers: o.workers},
		systems: []string{"twice", "river"},
		run: func(ctx context.Context, o *options, w workload) ([]string, error) {
			return o.runScale(ctx, w)
		},
		child: func(ctx context.Context, o *options) (*bench.Result, error) {
			switch *scaleRole {
			case "insert":
				return o.scaleInsert(ctx)
			case "work":
				return o.scaleWork(ctx)
			}
			return nil, fmt.Errorf("-scale-role %q: insert or work", *scaleRole)
		},
	}
}

// scaleRun is one burn-down by procs processes.
type scaleRun struct {
	jobs    int     // completed, as the table counts them
	seconds float64 // from the release to the last completion
	started []int   // each process's started jobs
}

func (r scaleRun) jobsPerS() float64 { return float64(r.jobs) / r.seconds }

// runScale runs each system with each process count, alternating the
// systems run by run.
func (o *options) runScale(ctx context.Context, w workload) ([]string, error) {
	results := map[string]map[int][]float64{}
	for _, sys := range w.systems {
		results[sys] = map[int][]float64{}
	}
	for i := range o.runs {
		for _, procs := range scaleProcesses {
			for _, sys := range rotated(w.systems, i) {
				r, err := o.scaleOnce(ctx, w.name, sys, procs, i+1)
				if err != nil {
					return nil, fmt.Errorf("run %d %s with %d processes: %w", i+1, sys, procs, err)
				}
				results[sys][procs] = append(results[sys][procs], r.jobsPerS())
				fmt.Printf("%-24s run %d %-10s %d process(es) %9.0f jobs/s %7d jobs %7.2fs started per process %v\n",
					w.name, i+1, sys, procs, r.jobsPerS(), r.jobs, r.seconds, r.started)
			}
		}
	}
	var lines []string
	for _, sys := range w.systems {
		one := median(results[sys][scaleProcesses[0]])
		for _, procs := range scaleProcesses {
			t := median(results[sys][procs])
			lines = append(lines, fmt.Sprintf("%-24s %s %d process(es) %.0f jobs/s: x%.2f of one process", w.name, sys, procs, t, t/one))
		}
	}
	a, b := w.systems[0], w.systems[1]
	for _, procs := range scaleProcesses {
		lines = append(lines, fmt.Sprintf("%-24s %d process(es): %s/%s %.2f", "", procs, a, b,
			median(results[a][procs])/median(results[b][procs])))
	}
	return lines, nil
}

// scaleOnce inserts the jobs, then runs procs worker processes at once and
// measures them.
func (o *options) scaleOnce(ctx context.Context, name, sys string, procs, run int) (scaleRun, error) {
	var r scaleRun
	if err := o.scaleConnections(ctx, procs); err != nil {
		return r, err
	}
	if _, err := o.spawnRun(ctx, name, sys, run, "-scale-role", "insert"); err != nil {
		return r, fmt.Errorf("insert: %w", err)
	}
	stopHog, err := startHog()
	if err != nil {
		return r, err
	}
	defer stopHog()
	children := make([]*scaleChild, 0, procs)
	defer func() {
		for _, c := range children {
			c.kill()
		}
	}()
	for p := range procs {
		c, err := o.startScaleChild(ctx, name, sys, run, p)
		if err != nil {
			return r, err
		}
		children = append(children, c)
	}
	for _, c := range children {
		if err := c.ready(); err != nil {
			return r, err
		}
	}
	t0 := time.Now()
	for _, c := range children {
		if err := c.release(); err != nil {
			return r, err
		}
	}
	for _, c := range children {
		res, err := c.result()
		if err != nil {
			return r, err
		}
		r.started = append(r.started, res.Jobs)
	}
	end, completed, err := o.lastCompletion(ctx, sys)
	if err != nil {
		return r, err
	}
	if completed != o.jobs {
		return r, fmt.Errorf("%d jobs completed, want %d", completed, o.jobs)
	}
	r.jobs, r.seconds = completed, end.Sub(t0).Seconds()
	if r.seconds <= 0 {
		return r, fmt.Errorf("the last job completed at %s, before the release at %s", end, t0)
	}
	return r, nil
}

// scaleConnections checks that procs processes' pools fit in the server's
// free connections.
func (o *options) scaleConnections(ctx context.Context, procs int) error {
	conn, err := pgx.Connect(ctx, o.pg)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(ctx) }()
	var free int
	if err := conn.QueryRow(ctx, `SELECT current_setting('max_connections')::int
		- current_setting('superuser_reserved_connections')::int - count(*) FROM pg_stat_activity
		WHERE backend_type = 'client backend'`).Scan(&free); err != nil {
		return err
	}
	// One more per process: its poll's connection.
	if need := procs * (o.poolConns + 1); need > free {
		return fmt.Errorf("%d processes need %d connections (-pool-conns %d each, and one to poll) and the server has %d free: lower -pool-conns or raise max_connections",
			procs, need, o.poolConns, free)
	}
	return nil
}

// lastCompletion is when system's last job completed, as stored, and how
// many completed.
func (o *options) lastCompletion(ctx context.Context, system string) (time.Time, int, error) {
	conn, err := pgx.Connect(ctx, o.pg)
	if err != nil {
		return time.Time{}, 0, err
	}
	defer func() { _ = conn.Close(ctx) }()
	q := `SELECT max(finished_at), count(*) FILTER (WHERE state = 'completed') FROM ` + twiceSchema + `.twice_jobs`
	if system == "river" {
		q = `SELECT max(finalized_at), count(*) FILTER (WHERE state = 'completed') FROM ` + riverSchema + `.river_job`
	}
	var (
		end *time.Time
		n   int
	)
	if err := conn.QueryRow(ctx, q).Scan(&end, &n); err != nil {
		return time.Time{}, 0, err
	}
	if end == nil {
		return time.Time{}, 0, errors.New("no job completed")
	}
	return *end, n, nil
}

// scaleChild is a running worker process.
type scaleChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	name  string
}

func (o *options) startScaleChild(ctx context.Context, workload, sys string, run, p int) (*scaleChild, error) {
	args := []string{"-child", "-system", sys, "-workload", workload, "-scale-role", "work",
		"-pg", o.pg, "-jobs", fmt.Sprint(o.jobs), "-workers", fmt.Sprint(o.workers),
		"-pool-conns", fmt.Sprint(o.poolConns), "-river-fetch-cooldown", o.cooldown.String()}
	if o.cpuProfile != "" {
		// The run number tells the processes' profiles apart: run*10+p.
		args = append(args, "-cpuprofile", o.cpuProfile, "-run", fmt.Sprint(run*10+p))
	}
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = childEnv(sys)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &scaleChild{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout), name: fmt.Sprintf("%s process %d", sys, p+1)}, nil
}

// ready waits for the child's "ready" line.
func (c *scaleChild) ready() error {
	l, err := c.out.ReadString('\n')
	if err != nil {
		return fmt.Errorf("%s exited before it was ready (printed %q): %w", c.name, l, err)
	}
	if strings.TrimSpace(l) != "ready" {
		return fmt.Errorf("%s printed %q, not ready", c.name, l)
	}
	return nil
}

// release lets the child start working.
func (c *scaleChild) release() error {
	_, err := io.WriteString(c.stdin, "go\n")
	return err
}

// result reads the child's JSON result and waits for it to exit.
func (c *scaleChild) result() (*bench.Result, error) {
	rest, err := io.ReadAll(c.out)
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Wait(); err != nil {
		return nil, fmt.Errorf("%s: %w", c.name, err)
	}
	c.cmd = nil
	var res bench.Result
	if err := json.Unmarshal([]byte(strings.TrimSpace(string(rest))), &res); err != nil {
		return nil, fmt.Errorf("%s printed %q: %w", c.name, rest, err)
	}
	return &res, nil
}

// kill ends a child result has not waited for.
func (c *scaleChild) kill() {
	if c.cmd != nil {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
	}
}

// scaleInsert empties the system's table and inserts -jobs jobs, without
// working them.
func (o *options) scaleInsert(ctx context.Context) (*bench.Result, error) {
	switch o.system {
	case "twice":
		u, err := o.schemaURL(twiceSchema)
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
		c, err := scaleTwiceClient(store, o.workers, nil)
		if err != nil {
			return nil, err
		}
		if err := inBatches(o.jobs, 1000, func(i int) twice.EnqueueParams {
			return twice.EnqueueParams{Args: bench.Args{Run: 1, N: int64(i)}}
		}, func(b []twice.EnqueueParams) error {
			_, err := c.EnqueueMany(ctx, b)
			return err
		}); err != nil {
			return nil, fmt.Errorf("insert: %w", err)
		}
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
		if err := execAll(ctx, u, `TRUNCATE river_job`, `VACUUM ANALYZE river_job`, `CHECKPOINT`); err != nil {
			return nil, err
		}
		client, err := scaleRiverClient(driver, o.workers, o.cooldown, &riverWorker{})
		if err != nil {
			return nil, err
		}
		if err := inBatches(o.jobs, 1000, func(i int) river.InsertManyParams {
			return river.InsertManyParams{Args: riverArgs{Run: 1, N: int64(i)}}
		}, func(b []river.InsertManyParams) error {
			_, err := client.InsertMany(ctx, b)
			return err
		}); err != nil {
			return nil, fmt.Errorf("insert: %w", err)
		}
	default:
		return nil, fmt.Errorf("pg-scale-nodes runs twice or river, not %q", o.system)
	}
	return &bench.Result{Mode: bench.ModeBurndown, Strategy: "none", Jobs: o.jobs}, nil
}

// scaleTwiceClient is a twice client working the bench kind with workers
// slots, counting started jobs in started (when not nil).
func scaleTwiceClient(store *twicepg.Store, workers int, started *atomic.Int64) (*twice.Client, error) {
	reg := twice.NewRegistry()
	if err := twice.Register(reg, twice.HandlerFunc[bench.Args](func(context.Context, *twice.Job[bench.Args]) error {
		if started != nil {
			started.Add(1)
		}
		return nil
	}), &twice.KindOpts{Strategy: twice.None}); err != nil {
		return nil, err
	}
	return twice.NewClient(store, twice.Config{
		Registry:   reg,
		Queues:     []twice.QueueConfig{{Name: twice.QueueDefault, Concurrency: workers}},
		MaxWorkers: workers,
		Logger:     slog.New(slog.DiscardHandler),
	})
}

// scaleRiverClient is a River client as riverRun configures it.
func scaleRiverClient(driver *riverpgxv5.Driver, workers int, cooldown time.Duration, w *riverWorker) (*river.Client[pgx.Tx], error) {
	ws := river.NewWorkers()
	river.AddWorker(ws, w)
	return river.NewClient(driver, &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers:           ws,
		FetchCooldown:     cooldown,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
	})
}

// scaleWork is one worker process: ready, released, then working until no
// job is left unfinished.
func (o *options) scaleWork(ctx context.Context) (*bench.Result, error) {
	var (
		started  atomic.Int64
		start    func() error
		stop     func(context.Context) error
		count    func() int64
		unfinish string
		schema   string
	)
	switch o.system {
	case "twice":
		u, err := o.schemaURL(twiceSchema)
		if err != nil {
			return nil, err
		}
		store, err := twicepg.Open(ctx, u)
		if err != nil {
			return nil, err
		}
		defer func() { _ = store.Close() }()
		c, err := scaleTwiceClient(store, o.workers, &started)
		if err != nil {
			return nil, err
		}
		start, stop, count = func() error { return c.Start(ctx) }, c.Stop, started.Load
		unfinish, schema = `SELECT EXISTS (SELECT 1 FROM twice_jobs WHERE state IN ('available', 'running'))`, twiceSchema
	case "river":
		u, err := o.schemaURL(riverSchema)
		if err != nil {
			return nil, err
		}
		pool, err := pgxpool.New(ctx, u)
		if err != nil {
			return nil, err
		}
		defer pool.Close()
		w := &riverWorker{}
		c, err := scaleRiverClient(riverpgxv5.New(pool), o.workers, o.cooldown, w)
		if err != nil {
			return nil, err
		}
		start, stop, count = func() error { return c.Start(ctx) }, c.Stop, w.started.Load
		unfinish, schema = `SELECT EXISTS (SELECT 1 FROM river_job WHERE state IN ('available', 'running', 'retryable', 'scheduled', 'pending'))`, riverSchema
	default:
		return nil, fmt.Errorf("pg-scale-nodes runs twice or river, not %q", o.system)
	}
	return o.scaleLoop(ctx, schema, unfinish, start, stop, count)
}

// scaleLoop prints ready, waits for the parent's release, starts, polls
// until no job is unfinished, stops, and returns the started count.
func (o *options) scaleLoop(ctx context.Context, schema, unfinished string, start func() error, stop func(context.Context) error, count func() int64) (*bench.Result, error) {
	u, err := o.schemaURL(schema)
	if err != nil {
		return nil, err
	}
	// A pool (the URL carries pool_max_conns, which pgx.Connect would
	// send the server), used one query at a time: one connection.
	poll, err := pgxpool.New(ctx, u)
	if err != nil {
		return nil, err
	}
	defer poll.Close()
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return nil, fmt.Errorf("wait for the release: %w", err)
	}
	t0 := time.Now()
	if err := start(); err != nil {
		return nil, err
	}
	tick := time.NewTicker(scalePoll)
	defer tick.Stop()
	for left := true; left; {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		if err := poll.QueryRow(ctx, unfinished).Scan(&left); err != nil {
			return nil, err
		}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := stop(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return nil, err
	}
	n := int(count())
	return &bench.Result{Mode: bench.ModeBurndown, Strategy: "none", Jobs: n, Seconds: time.Since(t0).Seconds()}, nil
}
