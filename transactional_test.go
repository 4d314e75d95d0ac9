package twice_test

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

type creditArgs struct {
	CreditID int64
	Cents    int64
}

func (creditArgs) Kind() string             { return "balance.credit.v1" }
func (a creditArgs) IdempotencyKey() string { return "credit-" + strconv.FormatInt(a.CreditID, 10) }

// execSQL runs statements in a transaction of the store's database.
func execSQL(t testing.TB, store twicestore.Store, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	tx, err := store.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stmts {
		if _, err := tx.Unwrap().(*sql.Tx).ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

func queryInt(t testing.TB, store twicestore.Store, q string) int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := store.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var n sql.NullInt64
	if err := tx.Unwrap().(*sql.Tx).QueryRowContext(ctx, q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n.Int64
}

// creditHandler applies a credit in the job's transaction; fail makes the
// handler fail after writing, to show the write is rolled back.
func creditHandler(fail *atomic.Bool) twice.HandlerFunc[creditArgs] {
	return func(ctx context.Context, job *twice.Job[creditArgs]) error {
		tx := job.SQLTx()
		if tx == nil {
			return errors.New("no transaction")
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO ledger (credit_id, cents) VALUES (?, ?)`, job.Args.CreditID, job.Args.Cents); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE balance SET cents = cents + ?`, job.Args.Cents); err != nil {
			return err
		}
		if fail != nil && fail.Load() {
			return errors.New("ledger service rejected the credit")
		}
		return nil
	}
}

func setupLedger(t *testing.T, store twicestore.Store) {
	execSQL(t, store,
		`CREATE TABLE ledger (credit_id INTEGER NOT NULL, cents INTEGER NOT NULL)`,
		`CREATE TABLE balance (cents INTEGER NOT NULL)`,
		`INSERT INTO balance VALUES (0)`)
}

func TestTransactional(t *testing.T) {
	t.Parallel()

	t.Run("claim, effect and completion commit together; a duplicate is a no-op", func(t *testing.T) {
		t.Parallel()
		store := newStore(t)
		setupLedger(t, store)
		reg := twice.NewRegistry()
		twice.MustRegister(reg, creditHandler(nil), &twice.KindOpts{Strategy: twice.Transactional})
		client := startClient(t, store, testConfig(reg))
		ctx := context.Background()
		a, err := client.Enqueue(ctx, creditArgs{CreditID: 7, Cents: 500}, nil)
		if err != nil {
			t.Fatal(err)
		}
		waitJob(t, store, a.Job.ID, "completed", isState(twicetype.JobStateCompleted))
		b, err := client.Enqueue(ctx, creditArgs{CreditID: 7, Cents: 500}, nil)
		if err != nil {
			t.Fatal(err)
		}
		row := waitJob(t, store, b.Job.ID, "completed", isState(twicetype.JobStateCompleted))
		if row.Note != "already processed" {
			t.Errorf("duplicate note = %q, want already processed", row.Note)
		}
		if n := queryInt(t, store, `SELECT count(*) FROM ledger`); n != 1 {
			t.Errorf("ledger rows = %d, want exactly 1", n)
		}
		if c := queryInt(t, store, `SELECT cents FROM balance`); c != 500 {
			t.Errorf("balance = %d, want 500", c)
		}
	})

	t.Run("a failed handler rolls back its effect and the claim", func(t *testing.T) {
		t.Parallel()
		store := newStore(t)
		setupLedger(t, store)
		var fail atomic.Bool
		fail.Store(true)
		reg := twice.NewRegistry()
		twice.MustRegister(reg, creditHandler(&fail), &twice.KindOpts{Strategy: twice.Transactional, MaxAttempts: 1})
		client := startClient(t, store, testConfig(reg))
		res, err := client.Enqueue(context.Background(), creditArgs{CreditID: 8, Cents: 100}, nil)
		if err != nil {
			t.Fatal(err)
		}
		waitJob(t, store, res.Job.ID, "dead", isState(twicetype.JobStateDead))
		if n := queryInt(t, store, `SELECT count(*) FROM ledger`); n != 0 {
			t.Errorf("ledger rows = %d after a failed attempt, want 0", n)
		}
		if markerProcessed(t, store, "balance.credit.v1", creditArgs{CreditID: 8}.IdempotencyKey()) {
			t.Error("marker claimed by a rolled-back attempt")
		}
	})

	t.Run("an epoch that moved inside the transaction rolls the effect back", func(t *testing.T) {
		t.Parallel()
		store := newStore(t)
		setupLedger(t, store)
		reg := twice.NewRegistry()
		// The handler writes its effect, then, in the same transaction,
		// plays another worker: the lease is rescued and the job refetched,
		// which moves the epoch on. The runtime's guarded completion must
		// then fail and take the effect down with it.
		twice.MustRegister(reg, twice.HandlerFunc[creditArgs](func(ctx context.Context, job *twice.Job[creditArgs]) error {
			if err := creditHandler(nil)(ctx, job); err != nil {
				return err
			}
			exec, err := store.ExecutorFromTx(job.Tx())
			if err != nil {
				return err
			}
			later := time.Now().Add(time.Hour)
			if _, err := exec.JobRescue(ctx, &twicestore.JobRescueParams{Now: later, Limit: 10}); err != nil {
				return err
			}
			_, err = exec.JobFetch(ctx, &twicestore.JobFetchParams{
				Queue: job.Queue, Kinds: []string{job.Kind}, Limit: 1, Node: "other", Now: later, LeaseUntil: later.Add(time.Hour),
			})
			return err
		}), &twice.KindOpts{Strategy: twice.Transactional, MaxAttempts: 1})
		client := startClient(t, store, testConfig(reg))
		res, err := client.Enqueue(context.Background(), creditArgs{CreditID: 9, Cents: 1}, &twice.EnqueueOpts{MaxAttempts: 5})
		if err != nil {
			t.Fatal(err)
		}
		row := waitJob(t, store, res.Job.ID, "retried", func(r *twicetype.JobRow) bool { return len(r.Errors) > 0 })
		if !strings.Contains(row.Errors[0].Error, "lease lost") {
			t.Errorf("error = %q, want a lease-lost error", row.Errors[0].Error)
		}
		if n := queryInt(t, store, `SELECT count(*) FROM ledger WHERE credit_id = 9`); n != 0 {
			t.Errorf("ledger rows = %d, want 0: the stale holder's effect must roll back", n)
		}
	})
}
