package twice_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// cancelJob asks the store to cancel job id, as an operator would.
func cancelJob(t *testing.T, store twicestore.Store, id int64) {
	t.Helper()
	res, err := store.JobCancel(context.Background(), &twicestore.JobCancelParams{
		Filter: twicestore.JobFilter{IDs: []int64{id}}, By: "ops@test", Reason: "wrong customer", Now: time.Now(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Results) != 1 || res.Results[0].Status != twicestore.JobActionCancelRequested {
		t.Fatalf("cancel results %+v, want the running job's cancel requested", res.Results)
	}
}

// runCancelled runs one job whose handler waits for its context, cancels
// it through the store, and checks the handler saw ErrJobCancelled and the
// job ended cancelled with the operator's note, never retried. It returns
// how long the cancel took to reach the handler.
func runCancelled(t *testing.T, store twicestore.Store, cfg func(*twice.Config), listening func()) time.Duration {
	t.Helper()
	started := make(chan struct{}, 1)
	causes := make(chan error, 1)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[pingArgs](func(ctx context.Context, _ *twice.Job[pingArgs]) error {
		started <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err() // ends cancelled whatever it returns
	}), &twice.KindOpts{Strategy: twice.None})
	c := testConfig(reg)
	cfg(&c)
	client := startClient(t, store, c)
	if listening != nil {
		listening()
	}
	job := enqueuePing(t, client, &twice.EnqueueOpts{MaxAttempts: 5})
	waitfor.Recv(t, started, "the handler to start")
	at := time.Now()
	cancelJob(t, store, job.ID)
	cause := waitfor.Recv(t, causes, "the cancel to reach the handler")
	took := time.Since(at)
	if !errors.Is(cause, twice.ErrJobCancelled) {
		t.Errorf("cause = %v, want ErrJobCancelled", cause)
	}
	row := waitJob(t, store, job.ID, "cancelled", isState(twicetype.JobStateCancelled))
	if row.Attempt != 1 || row.Note != "cancelled by ops@test: wrong customer" {
		t.Errorf("attempt %d note %q; want attempt 1 and the operator's note", row.Attempt, row.Note)
	}
	return took
}

// TestCancelRunningJobShortLease: on SQLite with a short lease, the cancel
// poll and the lease heartbeat both carry a cancel, whichever comes first;
// the job ends cancelled, not retried, though the handler returned an error.
func TestCancelRunningJobShortLease(t *testing.T) {
	t.Parallel()
	took := runCancelled(t, newStore(t), func(c *twice.Config) { c.LeaseDuration = time.Second }, nil)
	t.Logf("cancel reached the handler after %s (poll every 500ms, heartbeat every 333ms)", took)
}

// TestCancelRunningJobByNotify: on PostgreSQL a cancel reaches a running
// handler through LISTEN/NOTIFY, long before the next heartbeat (the lease
// is ten minutes, so its heartbeat comes after the test's wait would
// fail).
func TestCancelRunningJobByNotify(t *testing.T) {
	if os.Getenv(pgtest.EnvURL) == "" {
		t.Skip(pgtest.EnvURL + " not set")
	}
	t.Parallel()
	u, schema := pgtest.Schema(t, "cancel")
	store, err := twicepg.Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	conn, err := pgx.Connect(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	// The worker's LISTEN is up once a backend ran it; a cancel sent
	// before that would be lost and only the heartbeat would tell.
	listen := "LISTEN " + pgx.Identifier{"twice_cancel." + schema}.Sanitize()
	listening := func() {
		waitfor.Cond(t, "the worker to listen for cancels", func() bool {
			var n int
			if err := conn.QueryRow(context.Background(),
				"SELECT count(*) FROM pg_stat_activity WHERE query = $1", listen).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n > 0
		}, nil)
	}
	took := runCancelled(t, store, func(c *twice.Config) { c.LeaseDuration = 10 * time.Minute }, listening)
	t.Logf("cancel reached the handler after %s through NOTIFY", took)
}

// TestHandlerCancelsItsJob: a handler returning twice.Cancel ends its job
// cancelled on its first attempt, with the reason noted: not retried, and
// not dead-lettered as Permanent would.
func TestHandlerCancelsItsJob(t *testing.T) {
	t.Parallel()
	events := newEventLog()
	store, c := setupPing(t, func(c *twice.Config) { c.Observer = events }, func(context.Context, *twice.Job[pingArgs]) error {
		return twice.Cancel(errors.New("order withdrawn"))
	})
	job := enqueuePing(t, c, &twice.EnqueueOpts{MaxAttempts: 5})
	row := waitJob(t, store, job.ID, "cancelled", isState(twicetype.JobStateCancelled))
	if row.Attempt != 1 || row.Note != "cancelled by its handler: order withdrawn" || len(row.Errors) != 0 {
		t.Errorf("attempt %d note %q errors %v; want attempt 1, the reason noted, no error", row.Attempt, row.Note, row.Errors)
	}
	events.await(t, "test.ping.v1", twice.EventCancelled)
}

// TestClaimBeforeCancelReleasesItsClaim: a ClaimBefore handler that
// cancels its job says the effect did not happen: the claim is released,
// so a retry by hand runs again.
func TestClaimBeforeCancelReleasesItsClaim(t *testing.T) {
	t.Parallel()
	env := setupStrategy(t, twice.ClaimBefore, 0, func(context.Context, *twice.Job[emailArgs]) error {
		return twice.Cancel(errors.New("unsubscribed"))
	})
	job := env.enqueue(t, "k-cancel")
	waitJob(t, env.store, job.ID, "cancelled", isState(twicetype.JobStateCancelled))
	if markerProcessed(t, env.store.Store, emailHandler, "k-cancel") {
		t.Error("the claim was kept after the handler cancelled its job")
	}
}

// TestCancelTransactionalRollsBack: on PostgreSQL, cancelling a running
// Transactional job rolls its transaction back (the effect written in it
// is gone) and the job ends cancelled, not completed and not retried.
func TestCancelTransactionalRollsBack(t *testing.T) {
	if os.Getenv(pgtest.EnvURL) == "" {
		t.Skip(pgtest.EnvURL + " not set")
	}
	t.Parallel()
	store := stagedStores(t)["postgres"](t)
	execSQLAny(t, store, "CREATE TABLE cancel_effects (id INTEGER PRIMARY KEY)")
	written := make(chan struct{}, 1)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[pingArgs](func(ctx context.Context, job *twice.Job[pingArgs]) error {
		if err := execTx(ctx, job.Tx(), "INSERT INTO cancel_effects VALUES (1)"); err != nil {
			return err
		}
		written <- struct{}{}
		<-ctx.Done()
		return nil // the cancel decides, whatever the handler returns
	}), &twice.KindOpts{Strategy: twice.Transactional})
	client := startClient(t, store, testConfig(reg))
	job := enqueuePing(t, client, &twice.EnqueueOpts{MaxAttempts: 5})
	waitfor.Recv(t, written, "the effect to be written in the job's transaction")
	cancelJob(t, store, job.ID)
	row := waitJob(t, store, job.ID, "cancelled", isState(twicetype.JobStateCancelled))
	if row.Attempt != 1 {
		t.Errorf("attempt %d, want 1", row.Attempt)
	}
	ctx := context.Background()
	tx, err := store.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var n int
	if err := tx.Unwrap().(pgx.Tx).QueryRow(ctx, "SELECT count(*) FROM cancel_effects").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d effect rows after the cancel, want 0: the transaction must roll back", n)
	}
}
