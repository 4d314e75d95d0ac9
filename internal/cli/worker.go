package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/demo"
	"github.com/twicejobs/twice/twicemetrics"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twiceweb"
)

// shutdownSlack is how long serve waits, after its --grace, for the jobs
// cut off to be put back: the outcome writes are given up after 10 s and
// handlers that ignore their cancellation after 5 s more.
const shutdownSlack = 20 * time.Second

func (c *cli) serveCommand() *cobra.Command {
	var (
		grace     time.Duration
		redeliver bool
		dash      dashboardFlags
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Work the jobs of the kinds this binary registers until SIGINT or SIGTERM",
		Long: `Work the jobs of the kinds this binary was built with until SIGINT or
SIGTERM. Then stop fetching, let running jobs finish for --grace, and put
back, without spending an attempt, those that did not.

The stock twice binary registers no kinds, so its serve refuses to start:
build your own binary with twicecli.Main(registry) and run its serve, or
run 'twice dashboard' for the dashboard alone. serve never creates tables
other than twice's own, and never writes a switch.

With --dashboard ADDR it also serves the dashboard and Prometheus metrics
(/metrics) on ADDR. An address other than loopback needs
--dashboard-basic-auth or --dashboard-token.`,
		Args: unknownSubcommand,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if grace < 0 {
				return usagef("--grace %s is negative", grace)
			}
			if len(c.reg.Kinds()) == 0 {
				return usagef("this binary registers no job kinds, so serve has nothing to work: "+
					"build your own binary with twicecli.Main(registry) and run its serve, or run '%s dashboard --db ...' for the dashboard alone", c.name)
			}
			logger, err := c.logger(cmd, slog.LevelInfo)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			store, err := c.openStore(ctx, true)
			if err != nil {
				return err
			}
			defer func() { _ = store.Close() }()
			cfg := c.cfg
			cfg.Registry, cfg.Redeliver = c.reg, cfg.Redeliver || redeliver
			if len(cfg.Queues) == 0 {
				if cfg.Queues, err = c.defaultQueues(ctx, store); err != nil {
					return err
				}
			}
			if cfg.Logger == nil {
				cfg.Logger = logger
			}
			var metrics *twicemetrics.Metrics
			if cfg.Observer == nil {
				metrics = twicemetrics.New(store)
				cfg.Observer = metrics
			}
			client, err := twice.NewClient(store, cfg)
			if err != nil {
				return err
			}
			dashCtx, stopDash := context.WithCancel(ctx)
			defer stopDash()
			if dash.file == "" {
				dash.file = cfg.TogglesFile // the worker's own file, shown by its dashboard
			}
			waitDash, err := dash.start(dashCtx, client, metrics, cfg.Logger, c.stdout, false)
			if err != nil {
				return err
			}
			defer waitDash()
			if err := client.Start(ctx); err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "serving %s on %s\n", strings.Join(c.reg.Kinds(), ", "), displayDB(c.db))
			<-ctx.Done()
			cfg.Logger.Info("shutting down: running jobs have the grace period to finish", "grace", grace)
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace+shutdownSlack)
			defer cancel()
			return client.Shutdown(sctx, grace)
		}),
	}
	cmd.Flags().DurationVar(&grace, "grace", twice.ShutdownGraceDefault, "how long running jobs may take to finish on shutdown")
	dash.register(cmd, "dashboard", "", "serve the dashboard and /metrics on this address, e.g. 127.0.0.1:8090 (default: none)")
	cmd.Flags().BoolVar(&redeliver, "redeliver", false, "deliver every job a second time, sometimes at once, so a handler that does not converge shows it (development and staging only)")
	return cmd
}

// defaultQueues are the queues serve works when the binary's Config names
// none: the client's default queues, and every queue a registered kind
// goes to, so twicecli.Main(reg) alone works every kind it registers.
func (c *cli) defaultQueues(ctx context.Context, store twicestore.Store) ([]twice.QueueConfig, error) {
	probe, err := twice.NewClient(store, twice.Config{Registry: c.reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	kinds, err := probe.Catalog(ctx)
	if err != nil {
		return nil, err
	}
	// Config's own default, spelled out to be extended.
	queues := []twice.QueueConfig{{Name: twice.QueueCritical, Concurrency: 10}, {Name: twice.QueueDefault, Concurrency: 10}, {Name: twice.QueueBulk, Concurrency: 5}}
	for _, k := range kinds {
		if k.Registered && !slices.ContainsFunc(queues, func(q twice.QueueConfig) bool { return q.Name == k.Queue }) {
			queues = append(queues, twice.QueueConfig{Name: k.Queue})
		}
	}
	return queues, nil
}

func (c *cli) demoCommand() *cobra.Command {
	var (
		once      bool
		objects   string
		interval  time.Duration
		redeliver bool
		dash      dashboardFlags
		httpAddr  string
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the signup flow with injected faults; --once runs a scripted scenario and checks it converged",
		Long: `Run the seed's signup flow on --db, a SQLite file or a postgres:// URL (its
database and search_path schema must exist; the demo's tables are created
if missing): each signup commits its user row with
its verification-email and balance-credit jobs (the transactional outbox),
ad images get watermarked, and faults are injected through the real
runtime: redelivered messages, crashes between an email's send and its
claim, transient and permanent send failures, users deleted or confirmed
before their email goes out.

Without --once it keeps going on --db until Ctrl-C, and says what to look
at meanwhile. It also serves its HTTP API on --http: POST /signups, behind
the Idempotency-Key middleware, creates a user and enqueues the email in
one transaction; GET /users/ID shows how many emails the user got.

With --once it runs a scripted scenario to its end, prints per kind the
messages, deliveries (handler calls) and effects, and exits 0 only if every
effect converged as its strategy promises. Unless --db (or TWICE_DB) is
given, it uses a fresh SQLite database in a temporary directory, removed at
exit, so earlier runs cannot blur the check; on a database given with --db
it checks only what this run created.

Watermarked images go to --objects, by default ` + demo.ObjectsDirName + ` next to a
SQLite file, or for a postgres:// URL a directory of its own under the
system's temporary directory.`,
		Args: unknownSubcommand,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if once {
				return c.demoOnce(cmd, objects, redeliver)
			}
			logger, err := c.logger(cmd, slog.LevelInfo)
			if err != nil {
				return err
			}
			if interval <= 0 {
				return usagef("--interval %s: use a positive duration", interval)
			}
			metrics := (*twicemetrics.Metrics)(nil)
			waitDash := func() {}
			defer func() { waitDash() }()
			return demo.Run(cmd.Context(), demo.Options{
				DB: c.db, ObjectsDir: objects, Out: c.stdout, Logger: logger, Interval: interval, Redeliver: redeliver,
				HTTPAddr: httpAddr, HTTPOptional: !cmd.Flags().Changed("http"),
				Observer: func(store twicestore.Store) twice.Observer {
					metrics = twicemetrics.New(store)
					return metrics
				},
				Started: func(ctx context.Context, store twicestore.Store) (err error) {
					reg, err := demo.NewRegistry(nil)
					if err != nil {
						return err
					}
					client, err := twice.NewClient(store, twice.Config{Registry: reg, Logger: logger})
					if err != nil {
						return err
					}
					waitDash, err = dash.start(ctx, client, metrics, logger, c.stdout, !cmd.Flags().Changed("dashboard"))
					return err
				},
			})
		}),
	}
	cmd.Flags().BoolVar(&once, "once", false, "run the scripted scenario, check convergence and exit")
	cmd.Flags().StringVar(&objects, "objects", "", "directory for watermarked images (default: "+demo.ObjectsDirName+" next to a SQLite --db; for a URL, one of its own under the temporary directory)")
	cmd.Flags().DurationVar(&interval, "interval", 700*time.Millisecond, "time between two signups (without --once)")
	cmd.Flags().BoolVar(&redeliver, "redeliver", false, "deliver every job a second time, sometimes at once: the demo's handlers must still converge")
	cmd.Flags().StringVar(&httpAddr, "http", demo.HTTPAddrDefault, "address of the demo's HTTP API, POST /signups behind the Idempotency-Key middleware ('' for none; without --once)")
	dash.register(cmd, "dashboard", twiceweb.AddrDefault, "serve the dashboard and /metrics on this address (without --once); empty for none")
	return cmd
}

func (c *cli) demoOnce(cmd *cobra.Command, objects string, redeliver bool) error {
	logger, err := c.logger(cmd, slog.LevelWarn)
	if err != nil {
		return err
	}
	path := c.db
	if !cmd.Flags().Changed("db") && os.Getenv("TWICE_DB") == "" {
		dir, err := os.MkdirTemp("", "twice-demo-")
		if err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(dir) }()
		path = filepath.Join(dir, "demo.db")
		fmt.Fprintln(c.stdout, "using a fresh database, removed at exit (pass --db to keep one)")
	}
	r, err := demo.RunOnce(cmd.Context(), demo.Options{DB: path, ObjectsDir: objects, Out: c.stdout, Logger: logger, Redeliver: redeliver})
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return errors.New("demo interrupted")
		}
		return err
	}
	r.Print(c.stdout)
	if !r.Converged() {
		return fmt.Errorf("the demo diverged: %d effects are not what their strategy promises (listed above)", len(r.Divergences))
	}
	return nil
}
