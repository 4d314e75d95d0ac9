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
