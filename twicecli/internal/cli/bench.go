package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice/bench"
)

func (c *cli) benchCommand() *cobra.Command {
	var cpuProfile string
	cfg := bench.Config{
		Strategy: bench.StrategyDefault, Jobs: bench.JobsDefault, Duration: bench.DurationDefault,
		Rate: bench.RateDefault, Workers: bench.WorkersDefault,
	}
	// Each flag and the modes it applies to.
	applies := map[string][]string{
		"jobs":     {bench.ModeBurndown},
		"duration": {bench.ModeSteady, bench.ModeLatency, bench.ModeSignal},
		"rate":     {bench.ModeLatency, bench.ModeSignal},
		"parked":   {bench.ModeBurndown, bench.ModeSteady},
	}
	cmd := &cobra.Command{
		Use:   "bench burndown|steady|latency|signal",
		Short: "Measure throughput or latency of no-op jobs, or signal-to-start of waiting ones, on --db",
		Long: `Measure how fast twice works no-op jobs on the --db database, printing a
progress line every second on stderr and a one-line JSON summary on stdout
(mode, strategy, jobs, seconds, jobs_per_s, p50_ms, p95_ms, p99_ms,
max_rss_mb).

  burndown  insert --jobs jobs, then time the worker until all are done
  steady    insert and work at once for --duration, keeping a backlog;
            p50/p95/p99 are fetch-to-start times (from the fetch that
            leased a job to its start)
  latency   enqueue one job at a time at --rate a second for --duration;
            p50/p95/p99 are enqueue-to-start times
  signal    park rate × duration jobs that await a signal (kind
            bench.wait.v1), then signal them one at a time at --rate a
            second; p50/p95/p99 are signal-to-start times (from the call
            of Client.Signal to the handler's resumption)

With --parked N, a burndown or a steady run works beside N jobs parked on
a signal that never comes (parked before the timing starts).

The jobs are of kind bench.noop.v1 and are left in the database as
completed jobs (retention deletes them); use a scratch database.`,
		Example: `  twice bench burndown --db /tmp/bench.db --jobs 20000
  twice bench steady --db postgres://localhost/bench --duration 30s --strategy claim-after
  twice bench latency --db postgres://localhost/bench --rate 500 --duration 20s
  twice bench burndown --db postgres://localhost/bench --parked 100000
  twice bench signal --db postgres://localhost/bench --rate 200 --duration 10s
  twice bench burndown --db 'mysql://root@127.0.0.1:3306/bench?parseTime=true' --jobs 20000`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("%s takes one mode (burndown, steady, latency or signal), got %d arguments", cmd.CommandPath(), len(args))
			}
			return nil
		},
		RunE: run(func(cmd *cobra.Command, args []string) error {
			cfg.Mode = args[0]
			if !slices.Contains(bench.Modes, cfg.Mode) {
				return usagef("unknown mode %q: use burndown, steady, latency or signal", cfg.Mode)
			}
			for flag, modes := range applies {
				if cmd.Flags().Changed(flag) && !slices.Contains(modes, cfg.Mode) {
					return usagef("--%s does not apply to %s: it is for %s", flag, cfg.Mode, strings.Join(modes, " and "))
				}
			}
			switch {
			case cfg.Jobs <= 0:
				return usagef("--jobs %d: give a positive number of jobs", cfg.Jobs)
			case cfg.Duration <= 0:
				return usagef("--duration %s: give a positive duration such as 10s", cfg.Duration)
			case cfg.Rate <= 0:
				return usagef("--rate %d: give a positive number of jobs a second", cfg.Rate)
			case cfg.Workers <= 0:
				return usagef("--workers %d: give a positive number of workers", cfg.Workers)
			case cfg.Parked < 0:
				return usagef("--parked %d: give a positive number of jobs, or none", cfg.Parked)
			}
			if err := cfg.Validate(); err != nil {
				return &usageError{err: err}
			}
			store, err := c.openStore(cmd.Context(), true)
			if err != nil {
				return err
			}
			defer func() { _ = store.Close() }()
			cfg.Store, cfg.Progress = store, c.stderr
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				defer func() { _ = f.Close() }()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			res, err := bench.Run(cmd.Context(), cfg)
			if err != nil {
				return fmt.Errorf("bench %s: %w", cfg.Mode, err)
			}
			line, err := json.Marshal(res)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(c.stdout, "%s\n", line)
			return err
		}),
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Jobs, "jobs", cfg.Jobs, "burndown: how many jobs to insert and work")
	f.DurationVar(&cfg.Duration, "duration", cfg.Duration, "steady and latency: how long to run")
	f.IntVar(&cfg.Rate, "rate", cfg.Rate, "latency: jobs enqueued a second; signal: signals sent a second")
	f.IntVar(&cfg.Parked, "parked", 0, "burndown and steady: jobs parked on a signal beside the work")
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "jobs worked at once")
	f.StringVar(&cfg.Strategy, "strategy", cfg.Strategy, "strategy of the bench kind: none, claim-after or transactional")
	f.IntVar(&cfg.FetchLimit, "fetch-limit", 0, "most jobs one fetch takes (default: twice's FetchLimitDefault)")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the run (insert included) to this file, for go tool pprof")
	return cmd
}
