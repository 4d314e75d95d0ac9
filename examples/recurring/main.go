// Command recurring registers recurring jobs: a nightly report on a cron
// spec and a ping every second. Every worker runs the scheduler; each tick
// is recorded in the store with its job in one transaction, so a tick
// becomes one job however many workers run. It waits for the first ping,
// lists the schedules as an operator would see them, and triggers the
// nightly report by hand.
//
//	go run ./examples/recurring -db /tmp/recurring.db
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicesqlite"
)

// NightlyReport renders yesterday's report.
type NightlyReport struct{}

// Kind names the job.
func (NightlyReport) Kind() string { return "report.nightly.v1" }

// Ping checks a dependency.
type Ping struct {
	Target string `json:"target"`
}

// Kind names the job.
func (Ping) Kind() string { return "health.ping.v1" }

func main() {
	db := flag.String("db", "recurring.db", "SQLite database file")
	flag.Parse()
	if err := run(context.Background(), *db, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "recurring:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, path string, out io.Writer) error {
	store, err := twicesqlite.Open(ctx, path)
	if err != nil {
		return err
	}
	defer func() { _ = store.Close() }()

	pinged := make(chan string, 1)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[NightlyReport](func(context.Context, *twice.Job[NightlyReport]) error {
		return nil
	}), nil)
	twice.MustRegister(reg, twice.HandlerFunc[Ping](func(_ context.Context, job *twice.Job[Ping]) error {
		select {
		case pinged <- job.Args.Target:
		default:
		}
		return nil
	}), &twice.KindOpts{Strategy: twice.None}) // a ping twice is harmless
	// 03:00 every day, in the worker's time zone. A tick missed while every
	// worker was down runs once when one starts again.
	reg.MustSchedule("nightly-report", "0 3 * * *", NightlyReport{}, &twice.ScheduleOpts{Missed: twice.RunOnceMissed})
	// Every second, aligned to the clock, so all workers agree on ticks.
	reg.MustSchedule("ping-db", "@every 1s", Ping{Target: "db"}, nil)

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
	select {
	case target := <-pinged:
		_, _ = fmt.Fprintf(out, "pinged %s\n", target)
	case <-time.After(30 * time.Second):
		return errors.New("no ping within 30s")
	}
	stopCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := client.Shutdown(stopCtx, 10*time.Second); err != nil {
		return err
	}

	// The schedules, as `twice recurring ls` shows them: ping-db has ticked,
	// nightly-report is only registered until 03:00.
	schedules, err := client.ScheduleList(ctx)
	if err != nil {
		return err
	}
	for _, s := range schedules {
		_, _ = fmt.Fprintf(out, "%s %q %s: ticked %t\n", s.Name, s.Spec, s.Kind, s.Recorded)
	}

	// Run the nightly report now, as `twice recurring trigger` does: one
	// job per request id, so a retried call does not run it twice.
	for range 2 {
		res, err := client.ScheduleTrigger(ctx, &twice.ScheduleTriggerParams{
			Name: "nightly-report", RequestID: "rerun-after-incident-42", By: "ops@example.com", Reason: "report was wrong",
		})
		if err != nil {
			return err
		}
		_, _ = fmt.Fprintf(out, "triggered nightly-report: %s job, duplicate %t\n", res.Job.Kind, res.Duplicate)
	}
	return nil
}
