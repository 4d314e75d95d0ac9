package twicemysql_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/mysqltest"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicemysql"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// welcomeArgs is the job a signup enqueues in its own transaction.
type welcomeArgs struct {
	UserID int64 `json:"user_id"`
}

func (welcomeArgs) Kind() string { return "email.welcome.v1" }

// creditArgs is a job whose handler writes in the job's transaction.
type creditArgs struct {
	UserID int64 `json:"user_id"`
	Cents  int64 `json:"cents"`
}

func (creditArgs) Kind() string { return "balance.credit.v1" }

// appDB is an application's own pool on a database of the test's own,
// with its users table, and a Store on that pool (New), as an application
// that enqueues in its transactions has them.
func appDB(t *testing.T) (*sql.DB, *twicemysql.Store) {
	t.Helper()
	dsn, _ := mysqltest.Database(t, "twice_enqueuetx")
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	store, err := twicemysql.New(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	for _, stmt := range []string{
		`CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(100) NOT NULL)`,
		`CREATE TABLE balances (user_id BIGINT PRIMARY KEY, cents BIGINT NOT NULL)`,
	} {
		if _, err := db.ExecContext(t.Context(), stmt); err != nil {
			t.Fatal(err)
		}
	}
	return db, store
}

func newClient(t *testing.T, store twicestore.Store, reg *twice.Registry) *twice.Client {
	t.Helper()
	if reg == nil {
		reg = twice.NewRegistry()
	}
	c, err := twice.NewClient(store, twice.Config{
		Registry:     reg,
		PollInterval: 20 * time.Millisecond, // no LISTEN on MySQL: the poll finds a committed job
		Backoff:      func(int) time.Duration { return time.Millisecond },
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// jobCount counts the stored jobs, read outside any transaction.
func jobCount(t *testing.T, store twicestore.Store) int {
	t.Helper()
	res, err := store.JobList(t.Context(), &twicestore.JobListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return len(res.Jobs)
}

func userCount(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM users`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// signUp inserts a user and enqueues its welcome email in tx.
func signUp(t *testing.T, c *twice.Client, tx *sql.Tx, id int64) *twice.EnqueueResult {
	t.Helper()
	if _, err := tx.ExecContext(t.Context(), `INSERT INTO users (id, name) VALUES (?, ?)`, id, "user"); err != nil {
		t.Fatal(err)
	}
	res, err := c.EnqueueTx(t.Context(), tx, welcomeArgs{UserID: id}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestEnqueueTxCommitsWithTheCallersTransaction: a job EnqueueTx stores
// in the application's *sql.Tx is there if and only if the transaction
// commits, and no one sees it before, at the isolation levels an
// application begins with.
func TestEnqueueTxCommitsWithTheCallersTransaction(t *testing.T) {
	t.Parallel()
	for name, level := range map[string]sql.IsolationLevel{
		"server default":  sql.LevelDefault,
		"read committed":  sql.LevelReadCommitted,
		"repeatable read": sql.LevelRepeatableRead,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db, store := appDB(t)
			c := newClient(t, store, nil)

			tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
			if err != nil {
				t.Fatal(err)
			}
			signUp(t, c, tx, 1)
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			if n, u := jobCount(t, store), userCount(t, db); n != 0 || u != 0 {
				t.Fatalf("after rollback: %d jobs, %d users, want none", n, u)
			}

			tx, err = db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
			if err != nil {
				t.Fatal(err)
			}
			res := signUp(t, c, tx, 2)
			if res.Duplicate || res.Job.ID == 0 || res.Job.State != twicetype.JobStateAvailable {
				t.Errorf("EnqueueTx = dup %v, job %+v", res.Duplicate, res.Job)
			}
			many, err := c.EnqueueManyTx(ctx, tx, []twice.EnqueueParams{{Args: welcomeArgs{UserID: 3}}, {Args: welcomeArgs{UserID: 4}}})
			if err != nil || len(many) != 2 {
				t.Fatalf("EnqueueManyTx: %v (%d results)", err, len(many))
			}
			if n := jobCount(t, store); n != 0 {
				t.Errorf("before commit another connection sees %d jobs, want none", n)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			if n, u := jobCount(t, store), userCount(t, db); n != 3 || u != 1 {
				t.Fatalf("after commit: %d jobs, %d users, want 3 and 1", n, u)
			}
			got, err := store.JobGet(ctx, &twicestore.JobGetParams{ID: res.Job.ID})
			if err != nil || got.Kind != "email.welcome.v1" {
				t.Errorf("job %d after commit: %+v, %v", res.Job.ID, got, err)
			}
		})
	}
}

// TestEnqueueTxInAStoreTransaction: a transaction the Store began
// (twicestore.Tx) is a *sql.Tx once unwrapped, and EnqueueTx takes either.
func TestEnqueueTxInAStoreTransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, store := appDB(t)
	c := newClient(t, store, nil)
	tx, err := store.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sqlTx, ok := tx.Unwrap().(*sql.Tx)
	if !ok {
		t.Fatalf("Unwrap = %T, want *sql.Tx", tx.Unwrap())
	}
	if _, err := c.EnqueueTx(ctx, sqlTx, welcomeArgs{UserID: 1}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueTx(ctx, tx, welcomeArgs{UserID: 2}, nil); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := jobCount(t, store); n != 0 {
		t.Fatalf("after rollback jobs = %d, want 0", n)
	}
	tx, err = store.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueTx(ctx, tx.Unwrap(), welcomeArgs{UserID: 1}, nil); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := jobCount(t, store); n != 1 {
		t.Fatalf("after commit jobs = %d, want 1", n)
	}
}

// TestEnqueueTxUniqueKeyInTheTransaction: a unique key held by a job the
// same transaction enqueued makes the second enqueue a duplicate of it,
// and a rollback frees the key.
func TestEnqueueTxUniqueKeyInTheTransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, store := appDB(t)
	c := newClient(t, store, nil)
	opts := &twice.EnqueueOpts{UniqueKey: "welcome-7"}
	enqueueTwice := func() (*twice.EnqueueResult, *twice.EnqueueResult, *sql.Tx) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		a, err := c.EnqueueTx(ctx, tx, welcomeArgs{UserID: 7}, opts)
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.EnqueueTx(ctx, tx, welcomeArgs{UserID: 7}, opts)
		if err != nil {
			t.Fatal(err)
		}
		return a, b, tx
	}
	a, b, tx := enqueueTwice()
	if a.Duplicate || !b.Duplicate || b.Job.ID != a.Job.ID {
		t.Errorf("in one transaction: first dup %v, second dup %v, ids %d and %d", a.Duplicate, b.Duplicate, a.Job.ID, b.Job.ID)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	a, _, tx = enqueueTwice()
	if a.Duplicate {
		t.Error("the key is still held after the rollback")
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := jobCount(t, store); n != 1 {
		t.Errorf("jobs = %d, want 1", n)
	}
}

// TestEnqueueTxRefusesWhatIsNotATransaction: anything but a *sql.Tx (or a
// Store's own transaction) is refused with ErrWrongTx, a nil one too.
func TestEnqueueTxRefusesWhatIsNotATransaction(t *testing.T) {
	t.Parallel()
	_, store := appDB(t)
	c := newClient(t, store, nil)
	for _, tx := range []any{"not a tx", (*sql.Tx)(nil), nil, store} {
		if _, err := c.EnqueueTx(t.Context(), tx, welcomeArgs{UserID: 1}, nil); !errors.Is(err, twicestore.ErrWrongTx) {
			t.Errorf("EnqueueTx(%T): %v, want ErrWrongTx", tx, err)
		}
	}
	if n := jobCount(t, store); n != 0 {
		t.Errorf("jobs = %d, want 0", n)
	}
}

// TestCommittedJobRunsAndTransactionalWritesCommitWithIt: a worker finds
// the job a committed transaction enqueued (by polling: MySQL has no
// LISTEN), its handler sees the row committed with it, and a Transactional
// handler's writes in job.SQLTx() commit with the job's completion or roll
// back with its failure.
func TestCommittedJobRunsAndTransactionalWritesCommitWithIt(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, store := appDB(t)
	welcomed := make(chan string, 1)
	var failCredit atomic.Bool
	failCredit.Store(true)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[welcomeArgs](func(ctx context.Context, job *twice.Job[welcomeArgs]) error {
		var name string
		if err := db.QueryRowContext(ctx, `SELECT name FROM users WHERE id = ?`, job.Args.UserID).Scan(&name); err != nil {
			return err
		}
		welcomed <- name
		return nil
	}), nil)
	twice.MustRegister(reg, twice.HandlerFunc[creditArgs](func(ctx context.Context, job *twice.Job[creditArgs]) error {
		tx := job.SQLTx()
		if tx == nil {
			return twice.Permanent(errors.New("no transaction"))
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO balances (user_id, cents) VALUES (?, ?)
			ON DUPLICATE KEY UPDATE cents = cents + ?`, job.Args.UserID, job.Args.Cents, job.Args.Cents); err != nil {
			return err
		}
		if failCredit.Load() {
			failCredit.Store(false)
			return errors.New("ledger service rejected the credit")
		}
		return nil
	}), &twice.KindOpts{Strategy: twice.Transactional})
	c := newClient(t, store, reg)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Shutdown(sctx, time.Second)
	})

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO users (id, name) VALUES (42, 'Ada')`); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueTx(ctx, tx, welcomeArgs{UserID: 42}, nil); err != nil {
		t.Fatal(err)
	}
	credit, err := c.EnqueueTx(ctx, tx, creditArgs{UserID: 42, Cents: 500}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if name := waitfor.Recv(t, welcomed, "the welcome job to run"); name != "Ada" {
		t.Errorf("the handler read %q, want the committed user", name)
	}
	var j *twicetype.JobRow
	waitfor.Cond(t, "the credit job to complete", func() bool {
		if j, err = store.JobGet(ctx, &twicestore.JobGetParams{ID: credit.Job.ID}); err != nil {
			t.Fatal(err)
		}
		return j.State.Finished()
	}, func() string { return string(j.State) })
	var cents int64
	if err := db.QueryRowContext(ctx, `SELECT cents FROM balances WHERE user_id = 42`).Scan(&cents); err != nil {
		t.Fatal(err)
	}
	if j.State != twicetype.JobStateCompleted || j.Attempt != 2 || cents != 500 {
		t.Errorf("credit job %s after %d attempts, balance %d: want completed after 2 and 500 (the failed attempt's write rolled back)",
			j.State, j.Attempt, cents)
	}
}
