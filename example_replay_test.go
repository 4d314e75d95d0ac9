package twice_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicetype"
)

// ReceiptEmail is a job's args for the replay example.
type ReceiptEmail struct {
	Order string
	Fail  bool
}

func (ReceiptEmail) Kind() string             { return "email.receipt.v1" }
func (a ReceiptEmail) IdempotencyKey() string { return "receipt-" + a.Order }

// Before an incident's dead jobs are retried, the preview says what the
// retry would do to each: the receipt of order o-1 was sent since by
// another message with the same key, so its dead job's retry is a no-op;
// order o-2's was never sent, so its retry really runs.
func ExampleClient_JobRetryPreview() {
	var sent atomic.Int32
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[ReceiptEmail](func(_ context.Context, job *twice.Job[ReceiptEmail]) error {
		if job.Args.Fail {
			return twice.Permanent(errors.New("smtp relay refused the message"))
		}
		sent.Add(1)
		return nil
	}), &twice.KindOpts{Strategy: twice.ClaimAfter})
	client, stop := exampleClient(reg)
	defer stop()
	ctx := context.Background()
	for _, a := range []ReceiptEmail{{Order: "o-1", Fail: true}, {Order: "o-2", Fail: true}, {Order: "o-1"}} {
		res, err := client.Enqueue(ctx, a, nil)
		if err != nil {
			panic(err)
		}
		_, _ = client.Wait(ctx, res.Job.ID) // the failing ones end dead
	}
	preview, err := client.JobRetryPreview(ctx, &twice.JobActionParams{Filter: &twice.JobFilter{State: twicetype.JobStateDead}})
	if err != nil {
		panic(err)
	}
	fmt.Println("dead jobs:", preview.Total)
	fmt.Println("no-op:", preview.Counts[twice.ReplayNoop], "will run:", preview.Counts[twice.ReplayWillRun])
	fmt.Println("receipts sent:", sent.Load())
	// Output:
	// dead jobs: 2
	// no-op: 1 will run: 1
	// receipts sent: 1
}

// After an incident that lost the receipt of order o-4 (its marker
// released once the loss was confirmed), the completed receipts are
// replayed: asked for with state completed, since a retry by id alone
// refuses a completed job. The preview says which would really run; the
// replay sends o-4's receipt again and completes o-3's as a no-op.
func ExampleClient_JobRetry_completed() {
	var sent atomic.Int32
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[ReceiptEmail](func(context.Context, *twice.Job[ReceiptEmail]) error {
		sent.Add(1)
		return nil
	}), &twice.KindOpts{Strategy: twice.ClaimAfter})
	client, stop := exampleClient(reg)
	defer stop()
	ctx := context.Background()
	var ids []int64
	for _, order := range []string{"o-3", "o-4"} {
		res, err := client.Enqueue(ctx, ReceiptEmail{Order: order}, nil)
		if err != nil {
			panic(err)
		}
		_, _ = client.Wait(ctx, res.Job.ID)
		ids = append(ids, res.Job.ID)
	}
	if _, err := client.MarkerRelease(ctx, &twice.MarkerReleaseParams{
		MarkerParams: twice.MarkerParams{Handler: "email.receipt.v1", Key: "receipt-o-4"},
		By:           "ops", Reason: "the mail provider lost it"}); err != nil {
		panic(err)
	}

	res, _ := client.JobRetry(ctx, &twice.JobActionParams{IDs: ids[:1]})
	fmt.Println("by id alone:", errors.Is(res.Err(), twice.ErrJobNotRetryable))
	completed := &twice.JobActionParams{Filter: &twice.JobFilter{State: twicetype.JobStateCompleted}, By: "ops"}
	preview, err := client.JobRetryPreview(ctx, completed)
	if err != nil {
		panic(err)
	}
	fmt.Println("no-op:", preview.Counts[twice.ReplayNoop], "will run:", preview.Counts[twice.ReplayWillRun])
	res, err = client.JobRetry(ctx, completed)
	if err != nil {
		panic(err)
	}
	fmt.Println("replayed:", len(res.Changed()))
	for _, id := range ids {
		_, _ = client.Wait(ctx, id)
	}
	fmt.Println("receipts sent:", sent.Load())
	// Output:
	// by id alone: true
	// no-op: 1 will run: 1
	// replayed: 2
	// receipts sent: 3
}
