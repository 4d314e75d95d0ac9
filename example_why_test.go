package twice_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"fmt"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicesqlite"
)

// MonthlyInvoice bills a customer once a month.
type MonthlyInvoice struct{ CustomerID int64 }

func (MonthlyInvoice) Kind() string { return "invoice.monthly.v1" }

// Why isn't my job running? A worker runs both kinds, but the welcome
// emails are switched off, the invoice is due next century, and no worker
// knows the legacy export: JobWaitReasons says so for a page of jobs,
// reading the switches, queues, catalog and limits once for the page.
func ExampleClient_JobWaitReasons() {
	dir, _ := os.MkdirTemp("", "twice-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	store, err := twicesqlite.Open(ctx, filepath.Join(dir, "twice.db"))
	if err != nil {
		panic(err)
	}
	defer store.Close()
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[WelcomeEmail](func(context.Context, *twice.Job[WelcomeEmail]) error { return nil }), nil)
	twice.MustRegister(reg, twice.HandlerFunc[MonthlyInvoice](func(context.Context, *twice.Job[MonthlyInvoice]) error { return nil }), nil)
	client, err := twice.NewClient(store, twice.Config{Registry: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	_ = client.ToggleSet(ctx, &twice.ToggleSetParams{Kind: "email.welcome.v1", Enabled: false, By: "ops@example.com", Reason: "smtp down"})
	_, _ = client.Enqueue(ctx, WelcomeEmail{UserID: 42}, nil)
	_, _ = client.Enqueue(ctx, MonthlyInvoice{CustomerID: 7}, &twice.EnqueueOpts{RunAt: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)})
	_, _ = client.EnqueueJSON(ctx, "legacy.export.v1", []byte(`{"batch": 3}`), &twice.EnqueueOpts{AllowUnknownKind: true})
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = client.Shutdown(ctx, 10*time.Second) }()

	page, err := client.JobList(ctx, nil)
	if err != nil {
		panic(err)
	}
	reasons, err := client.JobWaitReasons(ctx, page.Jobs)
	if err != nil {
		panic(err)
	}
	for i, j := range page.Jobs {
		r := reasons[i]
		if r.Code == twice.WaitHeld {
			fmt.Printf("%s: %s (%s switch by %s: %q)\n", j.Kind, r.Code, r.Source, r.By, r.Reason)
			continue
		}
		fmt.Printf("%s: %s\n", j.Kind, r.Text)
	}
	// Output:
	// legacy.export.v1: orphaned: no live worker registers its kind; it waits for one (it is never failed or dropped for it)
	// invoice.monthly.v1: scheduled: due at 2100-01-01T00:00:00Z
	// email.welcome.v1: held (store switch by ops@example.com: "smtp down")
}
