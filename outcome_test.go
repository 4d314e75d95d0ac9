package twice_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

type pingArgs struct{ N int }

func (pingArgs) Kind() string { return "test.ping.v1" }

// setupPing starts a client with one None-strategy kind run by handler.
func setupPing(t *testing.T, cfg func(*twice.Config), handler func(ctx context.Context, job *twice.Job[pingArgs]) error) (twicestore.Store, *twice.Client) {
	t.Helper()
	store := newStore(t)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[pingArgs](handler), &twice.KindOpts{Strategy: twice.None})
	c := testConfig(reg)
	if cfg != nil {
		cfg(&c)
	}
	return store, startClient(t, store, c)
}

func enqueuePing(t *testing.T, c *twice.Client, opts *twice.EnqueueOpts) *twicetype.JobRow {
	t.Helper()
	res, err := c.Enqueue(context.Background(), pingArgs{N: 1}, opts)
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	return res.Job
}

func TestOutcomes(t *testing.T) {
	t.Parallel()

	t.Run("NoOp completes with its reason", func(t *testing.T) {
		t.Parallel()
		store, c := setupPing(t, nil, func(context.Context, *twice.Job[pingArgs]) error {
			return twice.NoOp("user deleted")
		})
		row := waitJob(t, store, enqueuePing(t, c, nil).ID, "completed", isState(twicetype.JobStateCompleted))
		if row.Note != "user deleted" || len(row.Errors) != 0 {
			t.Errorf("note=%q errors=%v; want the reason and no error", row.Note, row.Errors)
		}
	})

	t.Run("Snooze reschedules without spending an attempt", func(t *testing.T) {
		t.Parallel()
		store, c := setupPing(t, nil, func(context.Context, *twice.Job[pingArgs]) error {
			return twice.Snooze(time.Hour)
		})
		before := time.Now()
		job := enqueuePing(t, c, &twice.EnqueueOpts{MaxAttempts: 1})
		row := waitJob(t, store, job.ID, "snoozed", func(r *twicetype.JobRow) bool {
			return r.State == twicetype.JobStateAvailable && r.RunAt.After(before.Add(30*time.Minute))
		})
		if row.Attempt != 0 || len(row.Errors) != 0 {
			t.Errorf("attempt=%d errors=%v; want the attempt refunded and no error", row.Attempt, row.Errors)
		}
	})

	t.Run("retries with backoff, then dead-letters with the history and calls OnDead", func(t *testing.T) {
		t.Parallel()
		dead := make(chan twice.DeadJob, 1)
		store, c := setupPing(t, func(c *twice.Config) {
			c.OnDead = func(_ context.Context, d twice.DeadJob) { dead <- d }
		}, func(context.Context, *twice.Job[pingArgs]) error {
			return errors.New("upstream 503")
		})
		job := enqueuePing(t, c, &twice.EnqueueOpts{MaxAttempts: 3})
		row := waitJob(t, store, job.ID, "dead", isState(twicetype.JobStateDead))
		if row.Attempt != 3 || len(row.Errors) != 3 {
			t.Fatalf("attempt=%d errors=%d, want 3 and 3", row.Attempt, len(row.Errors))
		}
		for i, e := range row.Errors {
			if e.Attempt != i+1 || e.Error != "upstream 503" {
				t.Errorf("error %d = %+v", i, e)
			}
		}
		if d := waitfor.Recv(t, dead, "OnDead"); d.Job.ID != job.ID || !strings.Contains(d.Err.Error(), "upstream 503") {
			t.Errorf("OnDead got job %d err %v", d.Job.ID, d.Err)
		}
	})

	t.Run("Permanent dead-letters at once", func(t *testing.T) {
		t.Parallel()
		store, c := setupPing(t, nil, func(context.Context, *twice.Job[pingArgs]) error {
			return twice.Permanent(errors.New("invalid image"))
		})
		row := waitJob(t, store, enqueuePing(t, c, &twice.EnqueueOpts{MaxAttempts: 10}).ID, "dead", isState(twicetype.JobStateDead))
		if row.Attempt != 1 {
			t.Errorf("attempt = %d, want 1", row.Attempt)
		}
	})

	t.Run("a panic is an error with its stack kept", func(t *testing.T) {
		t.Parallel()
		store, c := setupPing(t, nil, func(_ context.Context, _ *twice.Job[pingArgs]) error {
			panic("image decoder blew up")
		})
		row := waitJob(t, store, enqueuePing(t, c, &twice.EnqueueOpts{MaxAttempts: 1}).ID, "dead", isState(twicetype.JobStateDead))
		e := row.Errors[0]
		if !strings.Contains(e.Error, "panic") || !strings.Contains(e.Stack, "outcome_test.go") {
			t.Errorf("error=%q stack has no test frame:\n%s", e.Error, e.Stack)
		}
	})

	t.Run("shutdown requeues a running job without spending an attempt", func(t *testing.T) {
		t.Parallel()
		store := newStore(t)
		reg := twice.NewRegistry()
		started := make(chan struct{}, 1)
		twice.MustRegister(reg, twice.HandlerFunc[pingArgs](func(ctx context.Context, _ *twice.Job[pingArgs]) error {
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}), &twice.KindOpts{Strategy: twice.None})
		c := startUnstopped(t, store, reg)
		job := enqueuePing(t, c, nil)
		<-started
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := c.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("stop: %v, want the grace period's context.DeadlineExceeded", err)
		}
		waitfor.Closed(t, c.Stopped(), "the shutdown to end")
		row, err := store.JobGet(context.Background(), &twicestore.JobGetParams{ID: job.ID})
		if err != nil {
			t.Fatal(err)
		}
		if row.State != twicetype.JobStateAvailable || row.Attempt != 0 || len(row.Errors) != 0 || row.Note != "requeued on shutdown" {
			t.Errorf("after stop: state=%s attempt=%d errors=%v note=%q; want available, attempt refunded, no error",
				row.State, row.Attempt, row.Errors, row.Note)
		}
	})

	t.Run("a job finishing within the grace period completes", func(t *testing.T) {
		t.Parallel()
		store := newStore(t)
		reg := twice.NewRegistry()
		started := make(chan struct{}, 1)
		release := make(chan struct{})
		twice.MustRegister(reg, twice.HandlerFunc[pingArgs](func(_ context.Context, _ *twice.Job[pingArgs]) error {
			started <- struct{}{}
			<-release
			return nil
		}), &twice.KindOpts{Strategy: twice.None})
		c := startUnstopped(t, store, reg)
		job := enqueuePing(t, c, nil)
		<-started
		stopped := make(chan error)
		go func() { stopped <- c.Stop(context.Background()) }()
		close(release)
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		row, _ := store.JobGet(context.Background(), &twicestore.JobGetParams{ID: job.ID})
		if row.State != twicetype.JobStateCompleted {
			t.Errorf("state = %s, want completed: the drain must let it finish", row.State)
		}
	})

	t.Run("a lost lease cancels the handler with ErrLeaseLost", func(t *testing.T) {
		t.Parallel()
		causes := make(chan error, 4)
		store, c := setupPing(t, func(c *twice.Config) { c.LeaseDuration = time.Second },
			func(ctx context.Context, job *twice.Job[pingArgs]) error {
				if job.Attempt > 1 {
					return nil
				}
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return ctx.Err()
			})
		job := enqueuePing(t, c, nil)
		waitJob(t, store, job.ID, "running", isState(twicetype.JobStateRunning))
		// Another node's rescuer decides the lease is gone.
		if _, err := store.JobRescue(context.Background(), &twicestore.JobRescueParams{Now: time.Now().Add(time.Hour), Limit: 10}); err != nil {
			t.Fatal(err)
		}
		if cause := waitfor.Recv(t, causes, "the handler to be cancelled after its lease was lost"); !errors.Is(cause, twice.ErrLeaseLost) {
			t.Errorf("cause = %v, want ErrLeaseLost", cause)
		}
		row := waitJob(t, store, job.ID, "completed", isState(twicetype.JobStateCompleted))
		if row.Attempt != 2 {
			t.Errorf("attempt = %d, want 2 (the rescued attempt, then the rerun)", row.Attempt)
		}
	})
}

func TestStuckHandlerIsLogged(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	release := make(chan struct{})
	store, c := setupPing(t, func(c *twice.Config) {
		c.LeaseDuration = time.Second
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	}, func(_ context.Context, job *twice.Job[pingArgs]) error {
		if job.Attempt == 1 {
			<-release // ignores its context
		}
		return nil
	})
	defer close(release)
	job := enqueuePing(t, c, nil)
	waitJob(t, store, job.ID, "running", isState(twicetype.JobStateRunning))
	if _, err := store.JobRescue(context.Background(), &twicestore.JobRescueParams{Now: time.Now().Add(time.Hour), Limit: 10}); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "the stuck-handler line", func() bool { return strings.Contains(logs.String(), "job handler is stuck") }, logs.String)
	if !strings.Contains(logs.String(), fmt.Sprintf("job_id=%d", job.ID)) {
		t.Errorf("stuck line does not name the job")
	}
}

func TestConfigRefusesShortMarkerRetention(t *testing.T) {
	t.Parallel()
	_, err := twice.NewClient(newStore(t), twice.Config{MarkerRetention: time.Hour})
	if err == nil || !strings.Contains(err.Error(), "MarkerRetention 1h0m0s is shorter than the longest retry horizon") {
		t.Fatalf("err = %v, want the retention refused", err)
	}
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[pingArgs](func(context.Context, *twice.Job[pingArgs]) error { return nil }),
		&twice.KindOpts{MaxAttempts: 200})
	_, err = twice.NewClient(newStore(t), twice.Config{Registry: reg})
	if err == nil || !strings.Contains(err.Error(), `kind "test.ping.v1"`) {
		t.Fatalf("err = %v, want the long-retrying kind named", err)
	}
}

// startUnstopped starts a client the test stops itself.
func startUnstopped(t *testing.T, store twicestore.Store, reg *twice.Registry) *twice.Client {
	t.Helper()
	c, err := twice.NewClient(store, testConfig(reg))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestErrorTextIsCapped: a 1 MiB error is stored cut to MaxErrorTextBytes,
// marked with how much was cut; before, it was stored whole on every
// attempt.
func TestErrorTextIsCapped(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("é", 1<<19) // 1 MiB of two-byte characters
	store, c := setupPing(t, nil, func(context.Context, *twice.Job[pingArgs]) error {
		return errors.New(huge)
	})
	row := waitJob(t, store, enqueuePing(t, c, &twice.EnqueueOpts{MaxAttempts: 1}).ID, "dead", isState(twicetype.JobStateDead))
	got := row.Errors[0].Error
	if len(got) > twice.MaxErrorTextBytes {
		t.Errorf("stored error is %d bytes, want at most %d", len(got), twice.MaxErrorTextBytes)
	}
	kept, mark, ok := strings.Cut(got, "… [cut: ")
	if !ok || !utf8.ValidString(kept) || !strings.HasPrefix(huge, kept) {
		t.Fatalf("stored error does not keep a valid beginning and a cut mark: ...%q", got[max(len(got)-40, 0):])
	}
	if want := fmt.Sprintf("%d bytes]", len(huge)-len(kept)); mark != want {
		t.Errorf("cut mark %q, want %q", mark, want)
	}
}

// TestSnoozeLimitDeadLetters: a handler that always snoozes is
// dead-lettered once its job snoozed KindOpts.MaxSnoozes times, with
// ErrTooManySnoozes in the error; before, it looped for ever without
// spending an attempt.
func TestSnoozeLimitDeadLetters(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	reg := twice.NewRegistry()
	var calls atomic.Int32
	twice.MustRegister(reg, twice.HandlerFunc[pingArgs](func(context.Context, *twice.Job[pingArgs]) error {
		calls.Add(1)
		return twice.Snooze(time.Millisecond)
	}), &twice.KindOpts{Strategy: twice.None, MaxSnoozes: 3})
	c := startClient(t, store, testConfig(reg))
	row := waitJob(t, store, enqueuePing(t, c, &twice.EnqueueOpts{MaxAttempts: 5}).ID, "dead", isState(twicetype.JobStateDead))
	if row.Snoozes != 3 || calls.Load() != 4 || row.Attempt != 1 {
		t.Errorf("snoozes %d, calls %d, attempt %d; want 3 snoozes, dead on the 4th call, one attempt spent",
			row.Snoozes, calls.Load(), row.Attempt)
	}
	if len(row.Errors) != 1 || !strings.Contains(row.Errors[0].Error, "snoozed too many times: 4 snoozes") {
		t.Errorf("errors %v, want the snooze limit named", row.Errors)
	}
	bad := twice.NewRegistry()
	if err := twice.Register(bad, twice.HandlerFunc[pingArgs](func(context.Context, *twice.Job[pingArgs]) error { return nil }),
		&twice.KindOpts{MaxSnoozes: -1}); err == nil || !strings.Contains(err.Error(), "MaxSnoozes is -1") {
		t.Errorf("register with MaxSnoozes -1: %v, want it refused", err)
	}
}
