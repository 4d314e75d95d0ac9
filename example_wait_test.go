package twice_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicetype"
)

// Refund is a job's args for the approval example.
type Refund struct {
	RefundID string `json:"refund_id"`
	Cents    int    `json:"cents"`
}

func (Refund) Kind() string { return "payments.refund.v1" }

// Approval is the payload a reviewer's signal carries.
type Approval struct {
	Approved bool   `json:"approved"`
	Reviewer string `json:"reviewer"`
}

// A refund waits for a person's approval: the handler reserves the funds
// (a step, so it is done once), then awaits the signal "approve". Until it
// arrives the job is parked as waiting, holding no worker slot and no
// lease, and no attempt is spent. The reviewer's signal (from the
// dashboard, the CLI's `twice jobs signal`, or Client.Signal) wakes it;
// the handler runs again from the top, the step returns its receipt
// without running, and the await returns the approval. A second signal
// of the same name changes nothing and says so. With no answer in three
// days, the await returns ErrWaitTimedOut and the handler escalates.
func ExampleAwaitSignal() {
	dir, _ := os.MkdirTemp("", "twice-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	store, err := twicesqlite.Open(ctx, filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	defer store.Close()

	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[Refund](func(ctx context.Context, job *twice.Job[Refund]) error {
		if _, err := twice.Step(ctx, "reserve", twice.ClaimAfter, func(context.Context) (string, error) {
			fmt.Println("reserving", job.Args.Cents, "cents")
			return "rsv_1", nil
		}); err != nil {
			return err
		}
		a, err := twice.AwaitSignal[Approval](ctx, "approve", 72*time.Hour)
		switch {
		case errors.Is(err, twice.ErrWaitTimedOut):
			return twice.RecordOutput(ctx, "escalated: nobody approved in 3 days")
		case err != nil:
			return err // a *twice.WaitError: the job parks until the signal
		case !a.Approved:
			return twice.Cancel(fmt.Errorf("refund refused by %s", a.Reviewer))
		}
		fmt.Println("refund approved by", a.Reviewer)
		return twice.RecordOutput(ctx, "refunded")
	}), &twice.KindOpts{Strategy: twice.None})

	client, err := twice.NewClient(store, twice.Config{Registry: reg})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = client.Shutdown(ctx, 10*time.Second) }()

	res, err := client.Enqueue(ctx, Refund{RefundID: "rf_1", Cents: 4200}, nil)
	if err != nil {
		panic(err)
	}
	for {
		job, err := client.JobGet(ctx, res.Job.ID)
		if err != nil {
			panic(err)
		}
		if job.State == twicetype.JobStateWaiting {
			fmt.Println("job is waiting for", job.WaitName)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	var sent []*twice.SignalResult
	for range 2 { // a reviewer who clicks twice
		r, err := client.Signal(ctx, &twice.SignalParams{JobID: res.Job.ID, Name: "approve",
			Payload: Approval{Approved: true, Reviewer: "ann"}, By: "ann@payments"})
		if err != nil {
			panic(err)
		}
		sent = append(sent, r)
	}
	out, err := client.Wait(ctx, res.Job.ID)
	if err != nil {
		panic(err)
	}
	for _, r := range sent {
		fmt.Println("signal: woke", r.Woke, "duplicate", r.Duplicate)
	}
	var result string
	_ = out.Decode(&result)
	fmt.Println("job", out.State+":", result)
	// Output:
	// reserving 4200 cents
	// job is waiting for approve
	// refund approved by ann
	// signal: woke true duplicate false
	// signal: woke false duplicate true
	// job completed: refunded
}

// Payment is a job's args for the webhook example.
type Payment struct {
	OrderID string `json:"order_id"`
}

func (Payment) Kind() string { return "payments.capture.v1" }

// A job that waits for a payment provider's webhook. The handler mints a
// wait token (signed with Config.WaitTokenKey) and hands it to the
// provider as its callback URL; the dashboard's JSON API takes the
// callback at POST /api/v1/signals/{token} (here, Client.SignalByToken
// does what that route does). The provider delivers the webhook twice,
// as providers do: the first resumes the job, the second is a duplicate
// that changes nothing, and the job captures the payment once.
func ExampleWaitToken() {
	dir, _ := os.MkdirTemp("", "twice-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	store, err := twicesqlite.Open(ctx, filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	defer store.Close()

	key := []byte("an example key of 32 bytes or more!") // in production: a secret from your vault
	callbacks := make(chan string, 1)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[Payment](func(ctx context.Context, job *twice.Job[Payment]) error {
		type webhook struct {
			Status string `json:"status"`
		}
		hook, err := twice.AwaitSignal[webhook](ctx, "paid", 24*time.Hour)
		var wait *twice.WaitError
		if errors.As(err, &wait) {
			// Not paid yet: give the provider a callback URL, then park.
			tok, terr := twice.WaitToken(ctx, "paid", 24*time.Hour)
			if terr != nil {
				return terr
			}
			callbacks <- "https://app.example/admin/jobs/api/v1/signals/" + tok
			return err
		}
		if err != nil {
			return err
		}
		fmt.Println("order", job.Args.OrderID, "captured:", hook.Status)
		return nil
	}), &twice.KindOpts{Strategy: twice.None})

	client, err := twice.NewClient(store, twice.Config{Registry: reg, WaitTokenKey: key})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = client.Shutdown(ctx, 10*time.Second) }()

	res, err := client.Enqueue(ctx, Payment{OrderID: "o-7"}, nil)
	if err != nil {
		panic(err)
	}
	url := <-callbacks
	token := url[strings.LastIndex(url, "/")+1:]
	for range 2 { // the provider delivers its webhook twice
		r, err := client.SignalByToken(ctx, token, map[string]string{"status": "succeeded"}, "provider")
		if err != nil {
			panic(err)
		}
		fmt.Println("webhook: duplicate", r.Duplicate)
	}
	out, err := client.Wait(ctx, res.Job.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println("job", out.State)
	// Unordered output:
	// webhook: duplicate false
	// webhook: duplicate true
	// order o-7 captured: succeeded
	// job completed
}

// Ticket is a job's args for the timeout example.
type Ticket struct{ ID int }

func (Ticket) Kind() string { return "support.sla.v1" }

// An SLA timer: the job waits for an agent's answer for a while; when the
// time is up first, the await returns ErrWaitTimedOut, on that run and
// every later one, and the handler escalates. A signal sent after the
// timeout is a duplicate of it and changes nothing.
func ExampleErrWaitTimedOut() {
	dir, _ := os.MkdirTemp("", "twice-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	store, err := twicesqlite.Open(ctx, filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	defer store.Close()

	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[Ticket](func(ctx context.Context, job *twice.Job[Ticket]) error {
		_, err := twice.AwaitSignal[string](ctx, "answered", 100*time.Millisecond) // hours, in production
		if errors.Is(err, twice.ErrWaitTimedOut) {
			fmt.Println("ticket", job.Args.ID, "escalated: nobody answered in time")
			return nil
		}
		return err
	}), &twice.KindOpts{Strategy: twice.None})
	client, err := twice.NewClient(store, twice.Config{Registry: reg})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = client.Shutdown(ctx, 10*time.Second) }()

	res, err := client.Enqueue(ctx, Ticket{ID: 12}, nil)
	if err != nil {
		panic(err)
	}
	out, err := client.Wait(ctx, res.Job.ID)
	if err != nil {
		panic(err)
	}
	late, err := client.Signal(ctx, &twice.SignalParams{JobID: res.Job.ID, Name: "answered", Payload: "on it"})
	if err != nil {
		panic(err)
	}
	fmt.Println("job", out.State+"; a late answer is a duplicate of the timeout:", late.Duplicate && late.Existing.TimedOut)
	// Output:
	// ticket 12 escalated: nobody answered in time
	// job completed; a late answer is a duplicate of the timeout: true
}
