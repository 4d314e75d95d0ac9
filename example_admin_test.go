package twice_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicesqlite"
)

// exampleAdminClient opens a fresh SQLite store and a client that is never
// started: the admin API needs no worker.
func exampleAdminClient() (*twice.Client, func()) {
	dir, _ := os.MkdirTemp("", "twice-admin-example")
	store, err := twicesqlite.Open(context.Background(), filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[WelcomeEmail](func(context.Context, *twice.Job[WelcomeEmail]) error { return nil }), nil)
	client, err := twice.NewClient(store, twice.Config{Registry: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		panic(err)
	}
	return client, func() { _ = store.Close(); _ = os.RemoveAll(dir) }
}

// Cancel a job that has not run yet; cancelling it again is refused with
// ErrJobFinished, a state error (the CLI's exit status 1), and changes
// nothing.
func ExampleClient_JobCancel() {
	client, done := exampleAdminClient()
	defer done()
	ctx := context.Background()
	res, _ := client.Enqueue(ctx, WelcomeEmail{UserID: 42}, &twice.EnqueueOpts{Delay: time.Hour})

	for range 2 {
		cancelled, err := client.JobCancel(ctx, &twice.JobActionParams{
			IDs: []int64{res.Job.ID}, By: "ops@example.com", Reason: "user deleted their account",
		})
		if err != nil {
			panic(err) // the call failed as a whole: bad input or the database
		}
		for _, j := range cancelled.Jobs { // one result per job
			fmt.Printf("job %d: changed %t, state %s, finished already: %t\n",
				j.ID, j.Changed, j.State, errors.Is(j.Err, twice.ErrJobFinished))
		}
	}
	job, _ := client.JobGet(ctx, res.Job.ID)
	fmt.Println(job.Note)
	// Output:
	// job 1: changed true, state cancelled, finished already: false
	// job 1: changed false, state cancelled, finished already: true
	// cancelled by ops@example.com: user deleted their account
}

// Pause a queue on every node for an hour. A queue nobody knows is a
// usage error (the CLI's exit status 2), so a typo never pauses nothing.
func ExampleClient_QueuePause() {
	client, done := exampleAdminClient()
	defer done()
	ctx := context.Background()

	err := client.QueuePause(ctx, &twice.QueuePauseParams{
		Queue: "default", Until: time.Now().Add(time.Hour), By: "ops@example.com", Reason: "smtp outage",
	})
	fmt.Println("paused:", err == nil)

	err = client.QueuePause(ctx, &twice.QueuePauseParams{Queue: "defualt", By: "ops@example.com"})
	fmt.Println(errors.Is(err, twice.ErrUnknownQueue), errors.Is(err, twice.ErrInvalidInput))

	queues, _ := client.QueueList(ctx)
	for _, q := range queues {
		fmt.Printf("%s paused: %t\n", q.Name, q.Paused)
	}
	// Output:
	// paused: true
	// true true
	// bulk paused: false
	// critical paused: false
	// default paused: true
}
