package twice_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicesqlite"
)

// ChargeOrder and ShipParcel are two steps of an order: shipping is a
// continuation of the charge.
type ChargeOrder struct{ OrderID int64 }

func (ChargeOrder) Kind() string             { return "order.charge.v1" }
func (a ChargeOrder) IdempotencyKey() string { return fmt.Sprint("charge-", a.OrderID) }

type ShipParcel struct{ OrderID int64 }

func (ShipParcel) Kind() string { return "parcel.ship.v1" }

// exampleClient starts a client on a fresh SQLite file; stop ends it.
func exampleClient(reg *twice.Registry) (c *twice.Client, stop func()) {
	dir, _ := os.MkdirTemp("", "twice-example")
	ctx := context.Background()
	store, err := twicesqlite.Open(ctx, filepath.Join(dir, "twice.db"))
	if err != nil {
		panic(err)
	}
	c, err = twice.NewClient(store, twice.Config{Registry: reg})
	if err != nil {
		panic(err)
	}
	if err := c.Start(ctx); err != nil {
		panic(err)
	}
	return c, func() {
		_ = c.Shutdown(ctx, 10*time.Second)
		_ = store.Close()
		_ = os.RemoveAll(dir)
	}
}

// A continuation: the charge's handler records the shipping job with
// Then, and the job is enqueued with the charge's completion, in the same
// write. A charge that fails enqueues nothing; a charge delivered twice
// enqueues one shipping job.
func ExampleJob_Then() {
	shipped := make(chan int64)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[ChargeOrder](func(_ context.Context, job *twice.Job[ChargeOrder]) error {
		fmt.Println("charged order", job.Args.OrderID)
		return job.Then(ShipParcel{OrderID: job.Args.OrderID}, nil)
	}), &twice.KindOpts{Strategy: twice.ClaimAfter})
	twice.MustRegister(reg, twice.HandlerFunc[ShipParcel](func(_ context.Context, job *twice.Job[ShipParcel]) error {
		shipped <- job.Args.OrderID
		return nil
	}), nil)
	client, stop := exampleClient(reg)
	defer stop()

	if _, err := client.Enqueue(context.Background(), ChargeOrder{OrderID: 7}, nil); err != nil {
		panic(err)
	}
	fmt.Println("shipped order", <-shipped)
	// Output:
	// charged order 7
	// shipped order 7
}

// Image is a workflow task's args: one step of publishing an image.
type Image struct {
	ID   int64
	Step string
}

func (Image) Kind() string { return "image.step.v1" }

// A workflow: fetch, then resize and thumbnail in parallel (fan-out), then
// publish once both are done (fan-in). Each task is enqueued by the
// completion of its last dependency, once.
func ExampleNewWorkflow() {
	var (
		mu   sync.Mutex
		done []string
	)
	published := make(chan string)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[Image](func(_ context.Context, job *twice.Job[Image]) error {
		mu.Lock()
		defer mu.Unlock()
		if job.Args.Step == "publish" {
			before := append([]string(nil), done...)
			sort.Strings(before)
			published <- strings.Join(before, ", ")
			return nil
		}
		done = append(done, job.Args.Step)
		return nil
	}), nil)
	client, stop := exampleClient(reg)
	defer stop()

	w := twice.NewWorkflow("publish image 9").
		Add("fetch", Image{9, "fetch"}, nil).
		Add("resize", Image{9, "resize"}, nil, "fetch").
		Add("thumbnail", Image{9, "thumbnail"}, nil, "fetch").
		Add("publish", Image{9, "publish"}, nil, "resize", "thumbnail")
	res, err := client.EnqueueWorkflow(context.Background(), w)
	if err != nil {
		panic(err)
	}
	fmt.Println("enqueued now:", len(res.Jobs), "of", res.Workflow.Tasks, "tasks")
	fmt.Println("publish ran after:", <-published)

	// A cycle is refused, naming it, and nothing is stored.
	_, err = client.EnqueueWorkflow(context.Background(), twice.NewWorkflow("loop").
		Add("a", Image{1, "a"}, nil, "b").Add("b", Image{1, "b"}, nil, "a"))
	fmt.Println(err)
	// Output:
	// enqueued now: 1 of 4 tasks
	// publish ran after: fetch, resize, thumbnail
	// twice: enqueue workflow: invalid workflow "loop": its tasks depend on each other in a cycle (a → b → a), so none of them could ever start: remove one of those dependencies
}

// Resize is a batch member; Report is the batch's callback.
type Resize struct{ Photo int }

func (Resize) Kind() string { return "photo.resize.v1" }

type Report struct{ Album int }

func (Report) Kind() string { return "album.report.v1" }

// A batch: the callback is enqueued once, by the write that finishes the
// batch's last job; the batch keeps its counts as its jobs finish.
func ExampleNewBatch() {
	reported := make(chan int)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[Resize](func(context.Context, *twice.Job[Resize]) error { return nil }), nil)
	twice.MustRegister(reg, twice.HandlerFunc[Report](func(_ context.Context, job *twice.Job[Report]) error {
		reported <- job.Args.Album
		return nil
	}), nil)
	client, stop := exampleClient(reg)
	defer stop()
	ctx := context.Background()

	b := twice.NewBatch(Report{Album: 3}, nil).OnSuccess()
	for photo := range 100 {
		b.Add(Resize{Photo: photo}, nil)
	}
	res, err := client.EnqueueBatch(ctx, b)
	if err != nil {
		panic(err)
	}
	fmt.Println("report for album", <-reported)
	got, err := client.BatchGet(ctx, res.Batch.ID)
	if err != nil {
		panic(err)
	}
	fmt.Printf("total %d, completed %d, pending %d, dead %d\n", got.Total, got.Completed, got.Pending, got.Dead)
	// Output:
	// report for album 3
	// total 100, completed 100, pending 0, dead 0
}
