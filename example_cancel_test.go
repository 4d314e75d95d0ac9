package twice_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
)

// ShipOrder is a job's args for the cancel example.
type ShipOrder struct{ OrderID int64 }

func (ShipOrder) Kind() string { return "order.ship.v1" }

// A handler that finds its job should not happen any more ends it with
// twice.Cancel: the job is cancelled, not retried and not dead-lettered,
// so nobody is paged. An operator's cancel of a running job reaches the
// handler as its context's cause, twice.ErrJobCancelled.
func ExampleCancel() {
	dir, _ := os.MkdirTemp("", "twice-example")
	defer func() { _ = os.RemoveAll(dir) }()
	ctx := context.Background()
	store, err := twicesqlite.Open(ctx, filepath.Join(dir, "jobs.db"))
	if err != nil {
		panic(err)
	}
	defer func() { _ = store.Close() }()

	withdrawn := map[int64]bool{7: true}
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[ShipOrder](func(ctx context.Context, job *twice.Job[ShipOrder]) error {
		if withdrawn[job.Args.OrderID] {
			return twice.Cancel(errors.New("order withdrawn by the customer"))
		}
		if errors.Is(context.Cause(ctx), twice.ErrJobCancelled) {
			return ctx.Err() // an operator cancelled it meanwhile
		}
		return nil
	}), &twice.KindOpts{Strategy: twice.ClaimAfter})

	// The Observer says when the job ended (here, to know when to look).
	cancelled := make(chan struct{}, 1)
	observe := twice.ObserverFunc(func(e twice.Event) {
		if e.Type == twice.EventCancelled {
			cancelled <- struct{}{}
		}
	})
	client, err := twice.NewClient(store, twice.Config{Registry: reg, Observer: observe})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	res, err := client.Enqueue(ctx, ShipOrder{OrderID: 7}, nil)
	if err != nil {
		panic(err)
	}
	<-cancelled
	row, err := store.JobGet(ctx, &twicestore.JobGetParams{ID: res.Job.ID})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s after %d attempt: %s\n", row.State, row.Attempt, row.Note)
	_ = client.Shutdown(ctx, 10*time.Second)
	// Output: cancelled after 1 attempt: cancelled by its handler: order withdrawn by the customer
}

// Stop returns when its context ends, with the context's error; Stopped
// tells when the shutdown is really over (the put-back jobs recorded), for
// a program that can wait a little longer before it exits.
func ExampleClient_Stopped() {
	dir, _ := os.MkdirTemp("", "twice-example")
	defer func() { _ = os.RemoveAll(dir) }()
	ctx := context.Background()
	store, err := twicesqlite.Open(ctx, filepath.Join(dir, "jobs.db"))
	if err != nil {
		panic(err)
	}
	defer func() { _ = store.Close() }()
	client, err := twice.NewClient(store, twice.Config{Registry: twice.NewRegistry()})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}

	grace, cancel := context.WithTimeout(ctx, 25*time.Second) // shorter than the orchestrator's kill
	defer cancel()
	if err := client.Stop(grace); err != nil {
		fmt.Println("grace period over:", err)
		select {
		case <-client.Stopped():
		case <-time.After(5 * time.Second): // then give up: the leases bring the jobs back
		}
	}
	<-client.Stopped()
	fmt.Println("stopped")
	// Output: stopped
}
