package cli

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicemetrics"
	"github.com/twicejobs/twice/twicestore"
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
			cfg.WaitTokenKey = c.waitTokenKey()
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
