// Command compare runs the same no-op job workloads on twice and on River,
// on the same PostgreSQL (and SQLite), alternating the two run by run, and
// prints each run and the median ratio twice/River per workload. The
// PostgreSQL burn-downs also run a third side, the ceiling: twice's own fetch
// and completion statements with no runtime around them (see ceilingPG), and
// print twice/ceiling. Each run is
// a child process of its own, so its peak RSS is its own and no run warms
// the heap of the next. See the README's "Benchmarks" section.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/twicejobs/twice/bench"
)

// options are the flags, shared by the parent and (passed on) the children.
type options struct {
	pg         string
	runs       int
	jobs       int
	sqliteJobs int
	growthRows int
	// growthRowsLarge is growth-20m's finished jobs.
	growthRowsLarge int
	duration        time.Duration
	rate            int
	workers         int
	poolConns       int
	cooldown        time.Duration
	only            string
	profiling
	backlogRows int // waiting jobs in pg-backlog-growth's large side
	chaos       chaosOptions

	// unpinned holds pg-steady's results once it ran, for the pinned
	// workloads' ratios, and unpinnedDead their n_dead_tup when a pinned
	// workload ran them (see pinned.go).
	unpinned     map[string][]*bench.Result
	unpinnedDead map[string][]int64

	// child mode
	child    bool
	system   string
	workload string
}

// workload is one comparison: the same bench.Config on each system.
type workload struct {
	name    string
	db      string // "pg" or "sqlite"
	cfg     bench.Config
	systems []string // the sides; the ratio is first/second
	ceiling bool     // also run the bare-SQL ceiling, and print twice/ceiling
	// finishedRows, when positive, is how many finished jobs the first
	// side ("twice-full") starts with (growth, growth-20m).
	finishedRows int
	// named tells that the workload runs only when -only names it: its
	// set-up alone takes minutes.
	named    bool
	latency  bool // compare p50/p99 too
	rssNoted bool // print peak RSS
	// run, when set, runs the whole workload in the parent instead of the
	// loop of runAll and returns its summary lines (issue 23's workloads).
	run func(ctx context.Context, o *options, w workload) ([]string, error)
	// child, when set, is what a child of this workload runs.
	child func(ctx context.Context, o *options) (*bench.Result, error)
}

func (o *options) workloads() []workload {
	burn := func(strategy string, jobs int) bench.Config {
		return bench.Config{Mode: bench.ModeBurndown, Strategy: strategy, Jobs: jobs, Workers: o.workers}
	}
	return []workload{
		{name: "pg-burndown-none", db: "pg", cfg: burn("none", o.jobs), systems: []string{"twice", "river"}, ceiling: true, rssNoted: true},
		{name: "pg-burndown-claim-after", db: "pg", cfg: burn("claim-after", o.jobs), systems: []string{"twice", "river"}, ceiling: true, rssNoted: true},
		{name: "pg-steady", db: "pg", cfg: bench.Config{Mode: bench.ModeSteady, Strategy: "none", Duration: o.duration, Workers: o.workers},
			systems: []string{"twice", "river"}},
		{name: "pg-latency", db: "pg", cfg: bench.Config{Mode: bench.ModeLatency, Strategy: "none", Duration: o.duration, Rate: o.rate, Workers: o.workers},
			systems: []string{"twice", "river"}, latency: true},
		{name: "sqlite-burndown", db: "sqlite", cfg: burn("none", o.sqliteJobs), systems: []string{"twice", "river"}},
		{name: "growth", db: "pg", cfg: burn("none", o.jobs), systems: []string{"twice-full", "twice"}, finishedRows: o.growthRows},
		{name: "growth-20m", db: "pg", cfg: burn("none", o.jobs), systems: []string{"twice-full", "twice"}, finishedRows: o.growthRowsLarge, named: true},
		// Issue 23: see pinned.go, backlog.go and scale.go.
		o.pinnedWorkload("pg-steady-pinned", pinSnapshot),
		o.pinnedWorkload("pg-steady-idle-tx", pinIdleTx),
		o.backlogWorkload(),
		o.scaleWorkload(),
	}
}

func main() {
	var o options
	flag.StringVar(&o.pg, "pg", envOr("TWICE_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL (schemas compare_twice and compare_river are created in it)")
	flag.IntVar(&o.runs, "runs", 3, "runs of each system per workload (at least 3 for a median worth reading)")
	flag.IntVar(&o.jobs, "jobs", 100_000, "jobs in a PostgreSQL burn-down")
	flag.IntVar(&o.sqliteJobs, "sqlite-jobs", 100_000, "jobs in the SQLite burn-down")
	flag.IntVar(&o.growthRows, "growth-rows", 5_000_000, "finished jobs already in the table for the growth workload")
	flag.IntVar(&o.growthRowsLarge, "growth-rows-large", 20_000_000, "finished jobs already in the table for the growth-20m workload")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "length of the steady and latency runs")
	flag.IntVar(&o.rate, "rate", 500, "jobs a second in the latency workload")
	flag.IntVar(&o.workers, "workers", 2000, "worker concurrency, the same for both systems (`river bench` uses 2,000)")
	flag.IntVar(&o.poolConns, "pool-conns", 20, "PostgreSQL pool size, the same for both systems (pool_max_conns)")
	flag.DurationVar(&o.cooldown, "river-fetch-cooldown", 2*time.Millisecond, "River's FetchCooldown (its default is 100ms; `river bench` uses 2ms, with a 20ms FetchPollInterval, which this also sets)")
	flag.StringVar(&o.only, "only", "", "comma-separated workloads to run (default all): pg-burndown-none, pg-burndown-claim-after, pg-steady, pg-latency, sqlite-burndown, growth, pg-steady-pinned (steady while another session holds a REPEATABLE READ snapshot), pg-steady-idle-tx (steady while another session is idle in transaction after a write), pg-backlog-growth (burn-down with -backlog-rows waiting jobs in another queue vs 100,000), pg-scale-nodes (burn-down by 1, 2 and 4 worker processes); run only when named: growth-20m (growth with -growth-rows-large finished jobs; each run's set-up takes minutes), chaos (a SIGKILL loop, correctness)")
	flag.IntVar(&o.backlogRows, "backlog-rows", 5_000_000, "waiting jobs (in a queue no worker listens on) already in the table for pg-backlog-growth's large side; its baseline has 100,000")
	o.flags()
	o.chaos.flags()
	flag.BoolVar(&o.child, "child", false, "internal: run one system on one workload and print its JSON result")
	flag.StringVar(&o.system, "system", "", "internal: twice, twice-full, river or ceiling")
	flag.StringVar(&o.workload, "workload", "", "internal: the workload's name")
	flag.Parse()
	if o.child {
		run := o.runChild
		if o.workload == "chaos" {
			run = o.runChaosChild
		}
		if err := run(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "compare child:", err)
			os.Exit(1)
		}
		return
	}
	if err := o.runAll(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// runAll runs every selected workload, alternating the sides run by run,
// and prints the runs and the medians.
func (o *options) runAll(ctx context.Context) error {
	if o.runs < 1 {
		return fmt.Errorf("-runs %d: give at least 1", o.runs)
	}
	if err := o.createSchemas(ctx); err != nil {
		return err
	}
	if only := strings.Split(o.only, ","); slices.Contains(only, "chaos") {
		// The correctness workload, run only when named (see chaos.go).
		if err := o.runChaos(ctx); err != nil || len(only) == 1 {
			return err
		}
	}
	fmt.Printf("twice vs River, %d runs each, %d workers, pool of %d; %s; %s\n", o.runs, o.workers, o.poolConns, hogNote(), pgSettings(ctx, o.pg))
	var selected []workload
	for _, w := range o.workloads() {
		if o.only == "" && !w.named || slices.Contains(strings.Split(o.only, ","), w.name) {
			selected = append(selected, w)
		}
	}
	if len(selected) == 0 {
		return fmt.Errorf("-only %q names no workload", o.only)
	}
	var summary []string
	for _, w := range selected {
		if w.run != nil {
			lines, err := w.run(ctx, o, w)
			if err != nil {
				return fmt.Errorf("%s: %w", w.name, err)
			}
			summary = append(summary, lines...)
			continue
		}
		results := map[string][]*bench.Result{}
		for i := range o.runs {
			// Each run starts with another side, so no side always runs
			// on the machine as the previous one left it.
			order := slices.Clone(w.systems)
			if w.ceiling {
				order = append(order, "ceiling")
			}
			k := i % len(order)
			order = append(slices.Clone(order[k:]), order[:k]...)
			for _, sys := range order {
				res, err := o.spawnProfiled(ctx, w.name, sys, i+1)
				if err != nil {
					return fmt.Errorf("%s run %d %s: %w", w.name, i+1, sys, err)
				}
				results[sys] = append(results[sys], res)
				fmt.Printf("%-24s run %d %-10s %9.0f jobs/s %7d jobs %7.2fs p50 %7.2fms p99 %7.2fms rss %6.1fMB\n",
					w.name, i+1, sys, res.JobsPerS, res.Jobs, res.Seconds, res.P50ms, res.P99ms, res.MaxRSSMB)
			}
		}
		if w.name == "pg-steady" {
			o.unpinned = results
		}
		summary = append(summary, w.summarize(results)...)
	}
	fmt.Println("\nmedians (ratio = first/second; throughput higher is better, latency lower is better)")
	for _, l := range summary {
		fmt.Println(l)
	}
	return nil
}

func (w workload) summarize(results map[string][]*bench.Result) []string {
	a, b := w.systems[0], w.systems[1]
	med := func(sys string, f func(*bench.Result) float64) float64 {
		var v []float64
		for _, r := range results[sys] {
			v = append(v, f(r))
		}
		return median(v)
	}
	tput := func(r *bench.Result) float64 { return r.JobsPerS }
	ta, tb := med(a, tput), med(b, tput)
	lines := []string{fmt.Sprintf("%-24s %s %.0f jobs/s, %s %.0f jobs/s: ratio %.2f", w.name, a, ta, b, tb, ta/tb)}
	if w.latency {
		for _, p := range []struct {
			name string
			f    func(*bench.Result) float64
		}{{"p50", func(r *bench.Result) float64 { return r.P50ms }}, {"p99", func(r *bench.Result) float64 { return r.P99ms }}} {
			la, lb := med(a, p.f), med(b, p.f)
			lines = append(lines, fmt.Sprintf("%-24s %s %s %.2fms, %s %.2fms", "", p.name, a, la, b, lb))
		}
	}
	if w.ceiling {
		tc := med("ceiling", tput)
		lines = append(lines, fmt.Sprintf("%-24s ceiling (twice's fetch and finish statements, %d loops of %d) %.0f jobs/s: twice/ceiling %.2f",
			"", ceilingLoops, ceilingBatch, tc, ta/tc))
	}
	if w.rssNoted {
		rss := func(r *bench.Result) float64 { return r.MaxRSSMB }
		lines = append(lines, fmt.Sprintf("%-24s peak RSS %s %.1fMB, %s %.1fMB", "", a, med(a, rss), b, med(b, rss)))
	}
	return lines
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// spawn runs one system on one workload in a child process and returns
// its result; extra are more flags for the child.
func (o *options) spawn(ctx context.Context, workload, system string, extra ...string) (*bench.Result, error) {
	args := []string{"-child", "-system", system, "-workload", workload,
		"-pg", o.pg, "-jobs", fmt.Sprint(o.jobs), "-sqlite-jobs", fmt.Sprint(o.sqliteJobs),
		"-growth-rows", fmt.Sprint(o.growthRows), "-growth-rows-large", fmt.Sprint(o.growthRowsLarge), "-duration", o.duration.String(), "-rate", fmt.Sprint(o.rate),
		"-workers", fmt.Sprint(o.workers), "-pool-conns", fmt.Sprint(o.poolConns), "-river-fetch-cooldown", o.cooldown.String()}
	args = append(args, extra...)
	stopHog, err := startHog()
	if err != nil {
		return nil, err
	}
	defer stopHog()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = childEnv(system)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, err
	}
	var res bench.Result
	if err := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &res); err != nil {
		return nil, fmt.Errorf("child printed %q: %w", out.String(), err)
	}
	return &res, nil
}
