package twice_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
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

// imageRow is the row a staged image job works on.
type imageRow struct {
	ID     int64
	Status string
}

// stagedEnv runs pingArgs jobs through a Staged handler over a table of
// rows, recording MarkFailed calls and the job's state at each.
type stagedEnv struct {
	store  twicestore.Store
	client *twice.Client
	mu     sync.Mutex
	rows   map[int]*imageRow
	marked []twicetype.JobState // the job's stored state when MarkFailed ran
}

func setupStaged(t *testing.T, work func(ctx context.Context, job *twice.Job[pingArgs], row *imageRow) error) *stagedEnv {
	t.Helper()
	e := &stagedEnv{store: newStore(t), rows: map[int]*imageRow{1: {ID: 1, Status: "processing"}}}
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.Staged[pingArgs, *imageRow]{
		Load: func(_ context.Context, job *twice.Job[pingArgs]) (*imageRow, bool, error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			row, ok := e.rows[job.Args.N]
			return row, ok, nil
		},
		Work: work,
		MarkFailed: func(ctx context.Context, job *twice.Job[pingArgs], row *imageRow, cause error) error {
			if ctx.Err() != nil {
				return errors.New("MarkFailed got a cancelled context")
			}
			stored, err := e.store.JobGet(ctx, &twicestore.JobGetParams{ID: job.ID})
			if err != nil {
				return err
			}
			e.mu.Lock()
			defer e.mu.Unlock()
			row.Status = "failed: " + cause.Error()
			e.marked = append(e.marked, stored.State)
			return nil
		},
	}, &twice.KindOpts{Strategy: twice.None})
	e.client = startClient(t, e.store, testConfig(reg))
	return e
}

func (e *stagedEnv) markedStates() []twicetype.JobState {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]twicetype.JobState(nil), e.marked...)
}

func (e *stagedEnv) enqueue(t *testing.T, n, maxAttempts int) int64 {
	t.Helper()
	res, err := e.client.Enqueue(context.Background(), pingArgs{N: n}, &twice.EnqueueOpts{MaxAttempts: maxAttempts})
	if err != nil {
		t.Fatal(err)
	}
	return res.Job.ID
}

func TestStaged(t *testing.T) {
	t.Parallel()

	t.Run("a swept row is a successful no-op", func(t *testing.T) {
		t.Parallel()
		e := setupStaged(t, func(context.Context, *twice.Job[pingArgs], *imageRow) error {
			t.Error("Work called without a row")
			return nil
		})
		row := waitJob(t, e.store, e.enqueue(t, 99, 3), "completed", isState(twicetype.JobStateCompleted))
		if row.Note == "" || len(e.markedStates()) != 0 {
			t.Errorf("note %q, marked %v; want a no-op note and nothing marked", row.Note, e.markedStates())
		}
	})

	t.Run("a failure that will be retried marks nothing", func(t *testing.T) {
		t.Parallel()
		e := setupStaged(t, func(_ context.Context, job *twice.Job[pingArgs], _ *imageRow) error {
			if job.Attempt == 1 {
				return errors.New("cdn timeout")
			}
			return nil
		})
		row := waitJob(t, e.store, e.enqueue(t, 1, 3), "completed", isState(twicetype.JobStateCompleted))
		if row.Attempt != 2 || len(e.markedStates()) != 0 {
			t.Errorf("attempt %d, marked %v; want a retry and nothing marked", row.Attempt, e.markedStates())
		}
	})

	t.Run("the final failed attempt marks the row before the job is dead", func(t *testing.T) {
		t.Parallel()
		e := setupStaged(t, func(context.Context, *twice.Job[pingArgs], *imageRow) error {
			return errors.New("corrupt image")
		})
		waitJob(t, e.store, e.enqueue(t, 1, 2), "dead", isState(twicetype.JobStateDead))
		marked := e.markedStates()
		if len(marked) != 1 || marked[0] != twicetype.JobStateRunning {
			t.Errorf("MarkFailed saw the job in states %v, want once, while still running", marked)
		}
		e.mu.Lock()
		got := e.rows[1].Status
		e.mu.Unlock()
		if got != "failed: corrupt image" {
			t.Errorf("row status = %q", got)
		}
	})

	t.Run("a permanent error marks at once", func(t *testing.T) {
		t.Parallel()
		e := setupStaged(t, func(context.Context, *twice.Job[pingArgs], *imageRow) error {
			return twice.Permanent(errors.New("unsupported format"))
		})
		row := waitJob(t, e.store, e.enqueue(t, 1, 5), "dead", isState(twicetype.JobStateDead))
		if row.Attempt != 1 || len(e.markedStates()) != 1 {
			t.Errorf("attempt %d, marked %v", row.Attempt, e.markedStates())
		}
	})

	t.Run("shutdown requeues without marking, even on the last attempt", func(t *testing.T) {
		t.Parallel()
		started := make(chan struct{}, 1)
		store := newStore(t)
		rows := map[int]*imageRow{1: {ID: 1}}
		var marked int
		reg := twice.NewRegistry()
		twice.MustRegister(reg, twice.Staged[pingArgs, *imageRow]{
			Load: func(_ context.Context, job *twice.Job[pingArgs]) (*imageRow, bool, error) {
				return rows[job.Args.N], true, nil
			},
			Work: func(ctx context.Context, _ *twice.Job[pingArgs], _ *imageRow) error {
				started <- struct{}{}
				<-ctx.Done()
				return ctx.Err()
			},
			MarkFailed: func(context.Context, *twice.Job[pingArgs], *imageRow, error) error {
				marked++
				return nil
			},
		}, &twice.KindOpts{Strategy: twice.None})
		c := startUnstopped(t, store, reg)
		res, err := c.Enqueue(context.Background(), pingArgs{N: 1}, &twice.EnqueueOpts{MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		<-started
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := c.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("stop: %v, want the grace period's context.DeadlineExceeded", err)
		}
		waitfor.Closed(t, c.Stopped(), "the shutdown to end")
		row, err := store.JobGet(context.Background(), &twicestore.JobGetParams{ID: res.Job.ID})
		if err != nil {
			t.Fatal(err)
		}
		if row.State != twicetype.JobStateAvailable || row.Attempt != 0 || marked != 0 {
			t.Errorf("after shutdown: state %s attempt %d marked %d; want requeued, unspent, unmarked", row.State, row.Attempt, marked)
		}
	})
}

// stagedStores are the stores the staged dead-letter tests run on: SQLite,
// and PostgreSQL when TWICE_TEST_POSTGRES is set.
func stagedStores(_ *testing.T) map[string]func(t *testing.T) twicestore.Store {
	stores := map[string]func(t *testing.T) twicestore.Store{
		"sqlite": func(t *testing.T) twicestore.Store { return newStore(t) },
	}
	if os.Getenv(pgtest.EnvURL) != "" {
		stores["postgres"] = func(t *testing.T) twicestore.Store {
			u, _ := pgtest.Schema(t, "staged")
			s, err := twicepg.Open(context.Background(), u)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
	}
	return stores
}

// execTx runs one statement in a twice transaction of either driver.
func execTx(ctx context.Context, tx any, stmt string) error {
	switch tx := tx.(type) {
	case *sql.Tx:
		_, err := tx.ExecContext(ctx, stmt)
		return err
	case pgx.Tx:
		_, err := tx.Exec(ctx, stmt)
		return err
	}
	return fmt.Errorf("unknown transaction type %T", tx)
}

// queryStatus reads an image's status in a fresh transaction.
func queryStatus(t *testing.T, store twicestore.Store, id int) string {
	t.Helper()
	ctx := context.Background()
	tx, err := store.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	q := fmt.Sprintf("SELECT status FROM staged_images WHERE id = %d", id)
	var status string
	switch tx := tx.Unwrap().(type) {
	case *sql.Tx:
		err = tx.QueryRowContext(ctx, q).Scan(&status)
	case pgx.Tx:
		err = tx.QueryRow(ctx, q).Scan(&status)
	}
	if err != nil {
		t.Fatal(err)
	}
	return status
}

// TestStagedMarksEveryDeadLetter: every failure that dead-letters a Staged
// job marks its row exactly once, on both drivers: (a) a panic in Work on
// the final attempt (it was recovered outside Staged, so the row stayed
// "processing"); (b) ClaimBefore, which dead-letters any error at once
// (Staged only looked at the attempt count); (c) Transactional, where the
// mark runs after the attempt's rollback in a transaction of its own
// (through the job's transaction it was rolled back; through another
// connection it waited on the attempt's locks: SQLITE_BUSY after 10 s, or
// 30 s on PostgreSQL).
func TestStagedMarksEveryDeadLetter(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		strategy    twice.Strategy
		maxAttempts int
		work        func(ctx context.Context, job *twice.Job[pingArgs]) error
		wantAttempt int
	}{
		{"a panic on the final attempt", twice.None, 2,
			func(context.Context, *twice.Job[pingArgs]) error { panic("decoder blew up") }, 2},
		{"claim-before dead-letters at once", twice.ClaimBefore, 5,
			func(context.Context, *twice.Job[pingArgs]) error { return errors.New("provider said 500") }, 1},
		{"transactional marks after the rollback", twice.Transactional, 2,
			func(ctx context.Context, job *twice.Job[pingArgs]) error {
				if err := execTx(ctx, job.Tx(), fmt.Sprintf("UPDATE staged_images SET status = 'resized' WHERE id = %d", job.Args.N)); err != nil {
					return err
				}
				return errors.New("upload failed after the write")
			}, 2},
	}
	for name, open := range stagedStores(t) {
		for _, tc := range cases {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				store := open(t)
				execSQLAny(t, store, "CREATE TABLE staged_images (id INTEGER PRIMARY KEY, status TEXT NOT NULL)",
					"INSERT INTO staged_images VALUES (1, 'processing')")
				var marks atomic.Int32
				reg := twice.NewRegistry()
				twice.MustRegister(reg, twice.Staged[pingArgs, int]{
					Load: func(_ context.Context, job *twice.Job[pingArgs]) (int, bool, error) { return job.Args.N, true, nil },
					Work: func(ctx context.Context, job *twice.Job[pingArgs], _ int) error { return tc.work(ctx, job) },
					MarkFailed: func(ctx context.Context, job *twice.Job[pingArgs], id int, _ error) error {
						marks.Add(1)
						stmt := fmt.Sprintf("UPDATE staged_images SET status = 'failed' WHERE id = %d", id)
						if tx := job.Tx(); tx != nil {
							return execTx(ctx, tx, stmt)
						}
						execSQLAny(t, store, stmt)
						return nil
					},
				}, &twice.KindOpts{Strategy: tc.strategy})
				c := startClient(t, store, testConfig(reg))
				res, err := c.Enqueue(context.Background(), pingArgs{N: 1}, &twice.EnqueueOpts{MaxAttempts: tc.maxAttempts})
				if err != nil {
					t.Fatal(err)
				}
				row := waitJob(t, store, res.Job.ID, "dead", isState(twicetype.JobStateDead))
				if row.Attempt != tc.wantAttempt {
					t.Errorf("dead at attempt %d, want %d", row.Attempt, tc.wantAttempt)
				}
				if n := marks.Load(); n != 1 {
					t.Errorf("MarkFailed ran %d times, want once", n)
				}
				if got := queryStatus(t, store, 1); got != "failed" {
					t.Errorf("row status %q, want failed", got)
				}
			})
		}
	}
}

// execSQLAny runs statements in a twice transaction of either driver.
func execSQLAny(t testing.TB, store twicestore.Store, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	tx, err := store.Begin(ctx)
	if err != nil {
		t.Error(err)
		return
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, s := range stmts {
		if err := execTx(ctx, tx.Unwrap(), s); err != nil {
			t.Errorf("%s: %v", s, err)
			return
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Error(err)
	}
}
