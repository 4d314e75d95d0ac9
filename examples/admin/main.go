// Command admin operates twice from code with the Client's admin API, the
// one the twice CLI and dashboard are built on: it cancels a job, pauses a
// queue (and shows the clear error a misspelled queue gets), retries the
// cancelled job, and switches a kind off for an hour, reading the switch's
// history back. The client is never started: the admin API needs no
// worker.
//
//	go run ./examples/admin -db /tmp/admin.db
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

// MonthlyReport renders one customer's report.
type MonthlyReport struct {
	CustomerID int64 `json:"customer_id"`
}

// Kind names the job.
func (MonthlyReport) Kind() string { return "report.monthly.v1" }

func main() {
	db := flag.String("db", "admin.db", "SQLite database file")
	flag.Parse()
	if err := run(context.Background(), *db, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "admin:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, path string, out io.Writer) error {
	store, err := twicesqlite.Open(ctx, path)
	if err != nil {
		return err
	}
	defer func() { _ = store.Close() }()
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[MonthlyReport](func(context.Context, *twice.Job[MonthlyReport]) error {
		return nil
	}), &twice.KindOpts{Queue: "reports"})
	client, err := twice.NewClient(store, twice.Config{
		Registry: reg,
		Queues:   []twice.QueueConfig{{Name: twice.QueueDefault}, {Name: "reports"}},
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	const ops = "ops@example.com"

	// A report due in an hour: listed as scheduled, not due.
	res, err := client.Enqueue(ctx, MonthlyReport{CustomerID: 7}, &twice.EnqueueOpts{Delay: time.Hour})
	if err != nil {
		return err
	}
	id := res.Job.ID
	scheduled, err := client.JobList(ctx, &twice.JobListParams{JobFilter: twice.JobFilter{Queue: "reports", Timing: twice.JobScheduled}})
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(out, "scheduled jobs in reports: %d\n", len(scheduled.Jobs))

	// Cancel it; a second cancel finds it finished. Each job has its own
	// result, so a batch never fails as a whole for one job.
	for range 2 {
		cancelled, err := client.JobCancel(ctx, &twice.JobActionParams{IDs: []int64{id}, By: ops, Reason: "customer closed the account"})
		if err != nil {
			return err
		}
		for _, j := range cancelled.Jobs {
			if j.Err != nil {
				_, _ = fmt.Fprintf(out, "cancel: %v (finished: %t)\n", j.Err, errors.Is(j.Err, twice.ErrJobFinished))
				continue
			}
			_, _ = fmt.Fprintf(out, "cancel: job is %s\n", j.State)
		}
	}
	job, err := client.JobGet(ctx, id)
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(out, "note: %s\n", job.Note)

	// Pause the queue for an hour, on every node. A misspelled queue is a
	// usage error, not a pause of nothing.
	until := time.Now().Add(time.Hour)
	if err := client.QueuePause(ctx, &twice.QueuePauseParams{Queue: "reports", Until: until, By: ops, Reason: "warehouse migration"}); err != nil {
		return err
	}
	err = client.QueuePause(ctx, &twice.QueuePauseParams{Queue: "reprots", By: ops})
	_, _ = fmt.Fprintf(out, "pause reprots: unknown queue: %t, usage error: %t\n", errors.Is(err, twice.ErrUnknownQueue), errors.Is(err, twice.ErrInvalidInput))
	queues, err := client.QueueList(ctx)
	if err != nil {
		return err
	}
	for _, q := range queues {
		if q.Paused {
			_, _ = fmt.Fprintf(out, "queue %s paused by %s: %s\n", q.Name, q.By, q.Reason)
		}
	}

	// Retry the cancelled job: it waits, paused, keeping its attempts.
	retried, err := client.JobRetry(ctx, &twice.JobActionParams{IDs: []int64{id}, By: ops, Reason: "account reopened"})
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(out, "retry: job is %s\n", retried.Jobs[0].State)
	if _, err := client.QueueResume(ctx, &twice.QueueResumeParams{Queue: "reports", By: ops, Reason: "migration done"}); err != nil {
		return err
	}

	// Switch the kind off for an hour; it comes back on by itself.
	err = client.ToggleSet(ctx, &twice.ToggleSetParams{
		Kind: "report.monthly.v1", Enabled: false, ExpiresAt: time.Now().Add(time.Hour), By: ops, Reason: "renderer leaks memory",
	})
	if err != nil {
		return err
	}
	err = client.ToggleSet(ctx, &twice.ToggleSetParams{Kind: "report.montly.v1", Enabled: false, By: ops})
	_, _ = fmt.Fprintf(out, "switch a typo: %v\n", err)
	history, err := client.ToggleHistory(ctx, &twice.ToggleHistoryParams{Kind: "report.monthly.v1"})
	if err != nil {
		return err
	}
	for _, c := range history.Changes {
		_, _ = fmt.Fprintf(out, "history: %s -> %s by %s: %s\n", c.Previous, c.New, c.By, c.Reason)
	}
	return nil
}
