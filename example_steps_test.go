package twice_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicesqlite"
)

// PlaceOrder is a job's args for the stepped checkout example.
type PlaceOrder struct{ OrderID string }

func (PlaceOrder) Kind() string             { return "order.place.v1" }
func (a PlaceOrder) IdempotencyKey() string { return "order-" + a.OrderID }

// Charge is the charge step's receipt: what a redelivery needs back.
type Charge struct {
	ID string `json:"id"`
}

// A handler of three named steps, each with its own bias: the charge is
// claimed before it runs (a duplicate charge is worse than none), the
// ledger row is written in the step's transaction (exactly once), and the
// receipt email is claimed after it is sent (a lost email is worse than
// two). A redelivered job gets each finished step's receipt back without
// running it again and resumes at the first unfinished step. The job's
// output, recorded with its completion, is read with JobResult or Wait.
func ExampleStep() {
	dir, _ := os.MkdirTemp("", "twice-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	store, err := twicesqlite.Open(ctx, filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	defer store.Close()
	tx, _ := store.Begin(ctx)
	_, _ = tx.Unwrap().(*sql.Tx).ExecContext(ctx, `CREATE TABLE ledger (order_id TEXT PRIMARY KEY, cents INTEGER)`)
	_ = tx.Commit(ctx)

	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[PlaceOrder](func(ctx context.Context, job *twice.Job[PlaceOrder]) error {
		charge, err := twice.Step(ctx, "charge", twice.ClaimBefore, func(ctx context.Context) (Charge, error) {
			// Send the same key on every delivery: the provider applies it once.
			_ = twice.EffectKey(ctx, "charge") // as the Idempotency-Key header
			fmt.Println("charging order", job.Args.OrderID)
			return Charge{ID: "ch_123"}, nil
		})
		if err != nil {
			return err // a failed ClaimBefore step dead-letters the job for a person
		}
		if _, err := twice.Step(ctx, "ledger", twice.Transactional, func(ctx context.Context) (bool, error) {
			_, err := twice.StepSQLTx(ctx).ExecContext(ctx,
				`INSERT INTO ledger (order_id, cents) VALUES (?, 4200)`, job.Args.OrderID)
			return true, err
		}); err != nil {
			return err
		}
		if _, err := twice.Step(ctx, "email", twice.ClaimAfter, func(context.Context) (string, error) {
			fmt.Println("emailing the receipt for", charge.ID)
			return "sent", nil
		}); err != nil {
			return err
		}
		return twice.RecordOutput(ctx, charge)
	}), &twice.KindOpts{Strategy: twice.None}) // each step carries its own bias

	client, err := twice.NewClient(store, twice.Config{Registry: reg})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = client.Shutdown(ctx, 10*time.Second) }()

	res, err := client.EnqueueAndWait(ctx, PlaceOrder{OrderID: "o-1"}, nil)
	if err != nil {
		panic(err)
	}
	var out Charge
	_ = res.Decode(&out)
	fmt.Println("job", res.State, "with charge", out.ID)
	// Output:
	// charging order o-1
	// emailing the receipt for ch_123
	// job completed with charge ch_123
}

// Thumbnail is a job's args for the EnqueueAndWait example.
type Thumbnail struct{ Width, Height int }

func (Thumbnail) Kind() string { return "image.thumbnail.v1" }

// EnqueueAndWait enqueues a job and blocks until it finishes (PostgreSQL
// wakes the waiter with a notification; SQLite polls), returning what the
// handler recorded with RecordOutput. A job that ends dead or cancelled
// returns an error wrapping ErrJobNotCompleted.
func ExampleClient_EnqueueAndWait() {
	dir, _ := os.MkdirTemp("", "twice-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	store, err := twicesqlite.Open(ctx, filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	defer store.Close()

	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[Thumbnail](func(ctx context.Context, job *twice.Job[Thumbnail]) error {
		return twice.RecordOutput(ctx, map[string]int{"pixels": job.Args.Width * job.Args.Height})
	}), &twice.KindOpts{Strategy: twice.None})
	client, err := twice.NewClient(store, twice.Config{Registry: reg})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = client.Shutdown(ctx, 10*time.Second) }()

	res, err := client.EnqueueAndWait(ctx, Thumbnail{Width: 640, Height: 480}, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.State, string(res.Output))
	// Output: completed {"pixels":307200}
}
