// Command quickstart is the smallest complete twice program: one kind, its
// handler, a worker on an embedded SQLite database, one job enqueued and
// worked, and the job looked up afterwards.
//
//	go run ./examples/quickstart -db /tmp/quickstart.db
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicesqlite"
)

// WelcomeEmail is a job's args: IDs only, never the data itself, and a
// versioned kind, so a new shape is a new kind that runs beside the old.
type WelcomeEmail struct {
	UserID int64 `json:"user_id"`
}

// Kind names the job.
func (WelcomeEmail) Kind() string { return "email.welcome.v1" }

func main() {
	db := flag.String("db", "quickstart.db", "SQLite database file (created when missing)")
	flag.Parse()
	if err := run(context.Background(), *db, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, path string, out io.Writer) error {
	// Open creates the file and applies twice's migrations.
	store, err := twicesqlite.Open(ctx, path)
	if err != nil {
		return err
	}
	defer func() { _ = store.Close() }()

	// Every handler runs at least twice some day (a lost acknowledgement, a
	// crash after the effect): ClaimAfter makes the runtime skip a message
	// whose effect already happened, at the price of a rare duplicate.
	sent := make(chan int64, 1)
	reg := twice.NewRegistry()
	err = twice.Register(reg, twice.HandlerFunc[WelcomeEmail](func(ctx context.Context, job *twice.Job[WelcomeEmail]) error {
		twice.Logger(ctx).Info("sending the welcome email") // carries job id, kind, attempt
		select {
		case sent <- job.Args.UserID:
		default:
		}
		return nil
	}), &twice.KindOpts{Strategy: twice.ClaimAfter})
	if err != nil {
		return err
	}

	client, err := twice.NewClient(store, twice.Config{
		Registry: reg,
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}

	res, err := client.Enqueue(ctx, WelcomeEmail{UserID: 42}, nil)
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(out, "enqueued %s\n", res.Job.Kind)
	select {
	case id := <-sent:
		_, _ = fmt.Fprintf(out, "welcome email sent to user %d\n", id)
	case <-time.After(30 * time.Second):
		return fmt.Errorf("the job did not run within 30s")
	}

	// Shutdown gives running jobs 10 s, puts back what still runs without
	// spending an attempt, and returns once every outcome is written.
	stopCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := client.Shutdown(stopCtx, 10*time.Second); err != nil {
		return err
	}
	job, err := client.JobGet(ctx, res.Job.ID)
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(out, "job is %s after %d attempt(s)\n", job.State, job.Attempt)
	return nil
}
