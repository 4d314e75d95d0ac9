package twice_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twicejobs/twice"
)

// Before removing a kind version's handler, ask what still holds it. A
// job delayed for an hour holds it; once cancelled, nothing does. A
// misspelled kind is a usage error naming the closest known one.
func ExampleClient_KindDrain() {
	client, done := exampleAdminClient()
	defer done()
	ctx := context.Background()
	res, _ := client.Enqueue(ctx, WelcomeEmail{UserID: 42}, &twice.EnqueueOpts{Delay: time.Hour})

	report, err := client.KindDrain(ctx, "email.welcome.v1")
	if err != nil {
		panic(err)
	}
	fmt.Println(report.Safe, report.Reason)

	_, _ = client.JobCancel(ctx, &twice.JobActionParams{IDs: []int64{res.Job.ID}, By: "ops@example.com", Reason: "v1 retired"})
	report, _ = client.KindDrain(ctx, "email.welcome.v1")
	fmt.Println(report.Safe, report.Reason)

	_, err = client.KindDrain(ctx, "email.welcom.v1")
	fmt.Println(errors.Is(err, twice.ErrUnknownKind), errors.Is(err, twice.ErrInvalidInput))
	// Output:
	// false not safe: 1 scheduled (job 1)
	// true safe to remove
	// true true
}
