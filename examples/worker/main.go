// Command worker is the shape of a production worker binary: it opens the
// store (SQLite file or PostgreSQL URL), registers the team's kinds and
// schedules, works them until SIGTERM or SIGINT, then drains: running jobs
// get a grace period shorter than the orchestrator's termination period
// (Kubernetes' terminationGracePeriodSeconds defaults to 30 s), after which
// their contexts are cancelled and unfinished jobs go back to their queue
// without spending an attempt.
//
//	go run ./examples/worker -db /tmp/app.db
//	go run ./examples/worker -db 'postgres://app@db:5432/app?sslmode=disable'
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
)

// shutdownGrace is how long running jobs may take to finish after SIGTERM.
// Keep it a few seconds under the orchestrator's termination period, so
// the drain (cancelling stragglers, writing their outcomes) is done before
// the process is killed.
const shutdownGrace = 25 * time.Second

// WelcomeEmail is one of the team's kinds.
type WelcomeEmail struct {
	UserID int64 `json:"user_id"`
}

// Kind names the job.
func (WelcomeEmail) Kind() string { return "email.welcome.v1" }

// Registry builds the team's registry: the worker, the team's CLI
// (twicecli.Main(reg)) and tests all use this one function, so they agree
// on kinds, strategies, queues and sensitive fields.
func Registry(out io.Writer) (*twice.Registry, error) {
	reg := twice.NewRegistry()
	err := twice.Register(reg, twice.HandlerFunc[WelcomeEmail](func(_ context.Context, job *twice.Job[WelcomeEmail]) error {
		_, _ = fmt.Fprintf(out, "sent welcome email to user %d\n", job.Args.UserID)
		return nil
	}), &twice.KindOpts{Strategy: twice.ClaimAfter, Queue: "email"})
	return reg, err
}

func main() {
	db := flag.String("db", "app.db", "SQLite file, or a postgres:// URL")
	flag.Parse()
	// SIGTERM is what an orchestrator sends; SIGINT is Ctrl-C.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(ctx, *db, os.Stdout, logger); err != nil {
		logger.Error("worker failed", "err", err)
		os.Exit(1)
	}
}

func openStore(ctx context.Context, dsn string) (twicestore.Store, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		return twicepg.Open(ctx, dsn)
	}
	return twicesqlite.Open(ctx, dsn)
}

// run works jobs until ctx is cancelled, then drains.
func run(ctx context.Context, dsn string, out io.Writer, logger *slog.Logger) error {
	store, err := openStore(ctx, dsn)
	if err != nil {
		return err
	}
	defer func() { _ = store.Close() }()
	reg, err := Registry(out)
	if err != nil {
		return err
	}
	client, err := twice.NewClient(store, twice.Config{
		Registry: reg,
		// The queues this worker serves; NewClient warns about a kind whose
		// queue is missing here, since no one would fetch its jobs.
		Queues: []twice.QueueConfig{
			{Name: twice.QueueCritical, Concurrency: 10},
			{Name: twice.QueueDefault, Concurrency: 10},
			{Name: "email", Concurrency: 5},
		},
		Logger: logger,
	})
	if err != nil {
		return err
	}
	// Start fails fast when the database is unreachable or not migrated.
	if err := client.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()

	// ctx is done: drain with a fresh deadline.
	stopCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	_, _ = fmt.Fprintln(out, "stopped")
	return nil
}
