package twice_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/waitfor"
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
		Load: func(ctx context.Context, job *twice.Job[pingArgs]) (*imageRow, bool, error) {
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
		e := setupStaged(t, func(ctx context.Context, job *twice.Job[pingArgs], row *imageRow) error {
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
			Load: func(ctx context.Context, job *twice.Job[pingArgs]) (*imageRow, bool, error) {
				return rows[job.Args.N], true, nil
			},
			Work: func(ctx context.Context, job *twice.Job[pingArgs], row *imageRow) error {
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
