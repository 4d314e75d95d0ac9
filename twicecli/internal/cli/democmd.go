package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicecli/internal/demo"
	"github.com/twicejobs/twice/twicemetrics"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twiceweb"
)

// DemoCommand builds 'twice demo' for the stock binary: twicecli.Stock
// sets it as Options.Demo. It is reached from there only, so a team's
// binary, built with twicecli.New or Main, does not link the demo.
func DemoCommand(c *cli) *cobra.Command { return c.demoCommand() }

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
		Long: `Run the seed's signup flow on --db, a SQLite file, a postgres:// URL (its
database and search_path schema must exist) or a mysql:// URL (its
database must exist, in utf8mb4; the demo's tables are created if
missing): each signup commits its user row with
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
SQLite file, or for a postgres:// or mysql:// URL a directory of its own under the
system's temporary directory.`,
		Args: unknownSubcommand,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if err := checkDBURL(c.db); err != nil {
				return err
			}
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
