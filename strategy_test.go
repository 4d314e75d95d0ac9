package twice_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// emailArgs is the seed's partner-verification email: IDs only, keyed by
// the user so two messages for one user converge too.
type emailArgs struct {
	UserID int64
	Key    string
}

func (emailArgs) Kind() string             { return "email.partner-verification.v1" }
func (a emailArgs) IdempotencyKey() string { return a.Key }

type strategyEnv struct {
	store  *recordingStore
	log    *callLog
	reg    *twice.Registry
	client *twice.Client
}

// setupStrategy registers handler for emailArgs with strategy and starts a
// client on a recording store.
func setupStrategy(t *testing.T, strategy twice.Strategy, maxAttempts int, handler func(ctx context.Context, job *twice.Job[emailArgs]) error) *strategyEnv {
	t.Helper()
	log := &callLog{}
	store := &recordingStore{Store: newStore(t), log: log}
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[emailArgs](handler), &twice.KindOpts{Strategy: strategy, MaxAttempts: maxAttempts})
	client := startClient(t, store, testConfig(reg))
	return &strategyEnv{store: store, log: log, reg: reg, client: client}
}

func (e *strategyEnv) enqueue(t *testing.T, key string) *twicetype.JobRow {
	t.Helper()
	res, err := e.client.Enqueue(context.Background(), emailArgs{UserID: 1, Key: key}, nil)
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	return res.Job
}

const emailHandler = "email.partner-verification.v1"

// The seed's three email invariants, applied by the runtime.
func TestClaimAfter(t *testing.T) {
	t.Parallel()

	t.Run("already processed: handler not called, nothing else touched", func(t *testing.T) {
		t.Parallel()
		var called atomic.Int32
		env := setupStrategy(t, twice.ClaimAfter, 0, func(_ context.Context, _ *twice.Job[emailArgs]) error {
			called.Add(1)
			return nil
		})
		if _, err := env.store.Store.MarkerClaim(context.Background(), &twicestore.MarkerParams{Handler: emailHandler, Key: "k1"}); err != nil {
			t.Fatal(err)
		}
		job := env.enqueue(t, "k1")
		row := waitJob(t, env.store, job.ID, "completed", isState(twicetype.JobStateCompleted))
		if called.Load() != 0 {
			t.Errorf("handler called %d times, want 0", called.Load())
		}
		if got := env.log.get(); !slices.Equal(got, []string{"peek"}) {
			t.Errorf("marker calls = %v, want only [peek]: a skip must not claim or touch anything", got)
		}
		if row.Note != "already processed" {
			t.Errorf("note = %q, want %q", row.Note, "already processed")
		}
	})

	t.Run("success: effect, then claim, in that order", func(t *testing.T) {
		t.Parallel()
		var env *strategyEnv
		env = setupStrategy(t, twice.ClaimAfter, 0, func(_ context.Context, _ *twice.Job[emailArgs]) error {
			env.log.add("effect")
			return nil
		})
		job := env.enqueue(t, "k2")
		waitJob(t, env.store, job.ID, "completed", isState(twicetype.JobStateCompleted))
		if got := env.log.get(); !slices.Equal(got, []string{"peek", "effect", "claim"}) {
			t.Errorf("calls = %v, want [peek effect claim]", got)
		}
		if !markerProcessed(t, env.store, emailHandler, "k2") {
			t.Error("marker not claimed after a successful effect")
		}
	})

	t.Run("effect error: never claimed, the retry really re-runs", func(t *testing.T) {
		t.Parallel()
		var env *strategyEnv
		var attempts atomic.Int32
		env = setupStrategy(t, twice.ClaimAfter, 2, func(_ context.Context, _ *twice.Job[emailArgs]) error {
			if attempts.Add(1) == 1 {
				env.log.add("effect-failed")
				return errors.New("smtp: 421 try again later")
			}
			env.log.add("effect")
			return nil
		})
		job := env.enqueue(t, "k3")
		row := waitJob(t, env.store, job.ID, "completed", isState(twicetype.JobStateCompleted))
		want := []string{"peek", "effect-failed", "peek", "effect", "claim"}
		if got := env.log.get(); !slices.Equal(got, want) {
			t.Errorf("calls = %v, want %v", got, want)
		}
		if row.Attempt != 2 || len(row.Errors) != 1 || !strings.Contains(row.Errors[0].Error, "421") {
			t.Errorf("attempt=%d errors=%v, want attempt 2 with the SMTP error kept", row.Attempt, row.Errors)
		}
	})

	t.Run("final failure: dead-lettered without a claim", func(t *testing.T) {
		t.Parallel()
		env := setupStrategy(t, twice.ClaimAfter, 1, func(_ context.Context, _ *twice.Job[emailArgs]) error {
			return errors.New("smtp down")
		})
		job := env.enqueue(t, "k4")
		waitJob(t, env.store, job.ID, "dead", isState(twicetype.JobStateDead))
		if env.log.count("claim") != 0 || markerProcessed(t, env.store, emailHandler, "k4") {
			t.Error("a failed effect left a claim")
		}
	})
}

func TestClaimBefore(t *testing.T) {
	t.Parallel()

	t.Run("duplicate claim is a no-op", func(t *testing.T) {
		t.Parallel()
		var called atomic.Int32
		env := setupStrategy(t, twice.ClaimBefore, 0, func(_ context.Context, _ *twice.Job[emailArgs]) error {
			called.Add(1)
			return nil
		})
		first := env.enqueue(t, "charge-1")
		waitJob(t, env.store, first.ID, "completed", isState(twicetype.JobStateCompleted))
		second := env.enqueue(t, "charge-1")
		row := waitJob(t, env.store, second.ID, "completed", isState(twicetype.JobStateCompleted))
		if called.Load() != 1 || row.Note != "already processed" {
			t.Errorf("handler calls = %d, note = %q; want 1 call and the duplicate a no-op", called.Load(), row.Note)
		}
		if got := env.log.get(); !slices.Equal(got, []string{"claim", "claim"}) {
			t.Errorf("calls = %v, want [claim claim]", got)
		}
	})

	t.Run("failure keeps the claim and dead-letters for a human", func(t *testing.T) {
		t.Parallel()
		env := setupStrategy(t, twice.ClaimBefore, 5, func(_ context.Context, _ *twice.Job[emailArgs]) error {
			return errors.New("provider timeout")
		})
		job := env.enqueue(t, "charge-2")
		row := waitJob(t, env.store, job.ID, "dead", isState(twicetype.JobStateDead))
		if row.Attempt != 1 {
			t.Errorf("attempt = %d, want 1: a maybe-applied effect must not be retried", row.Attempt)
		}
		if !markerProcessed(t, env.store, emailHandler, "charge-2") {
			t.Error("claim released after a maybe-applied failure")
		}
		if !strings.Contains(row.Errors[0].Error, "may have happened") {
			t.Errorf("error %q does not explain the dead letter", row.Errors[0].Error)
		}
	})

	t.Run("not applied releases the claim and retries", func(t *testing.T) {
		t.Parallel()
		var attempts atomic.Int32
		env := setupStrategy(t, twice.ClaimBefore, 3, func(_ context.Context, _ *twice.Job[emailArgs]) error {
			if attempts.Add(1) == 1 {
				return twice.NotApplied(errors.New("card declined before charge"))
			}
			return nil
		})
		job := env.enqueue(t, "charge-3")
		row := waitJob(t, env.store, job.ID, "completed", isState(twicetype.JobStateCompleted))
		if row.Attempt != 2 {
			t.Errorf("attempt = %d, want 2", row.Attempt)
		}
		if got := env.log.get(); !slices.Equal(got, []string{"claim", "release", "claim"}) {
			t.Errorf("calls = %v, want [claim release claim]", got)
		}
	})
}

// lostOutcomeStore drops the first outcome written, reporting it not
// applied, as when the process dies before writing it: the lease runs out
// and the job is delivered again under a newer epoch. Tests using it run
// one job at a time.
type lostOutcomeStore struct {
	twicestore.Store
	lost atomic.Bool
}

func (s *lostOutcomeStore) JobFinish(ctx context.Context, p *twicestore.JobFinishParams) (*twicestore.JobFinishResult, error) {
	if s.lost.CompareAndSwap(false, true) {
		return &twicestore.JobFinishResult{Applied: make([]bool, len(p.Outcomes))}, nil
	}
	return s.Store.JobFinish(ctx, p)
}

// TestClaimBeforeCrash: a ClaimBefore job whose delivery died after its
// claim is dead-lettered when redelivered, because its effect may have
// happened; it is neither run again nor completed as a silent no-op.
func TestClaimBeforeCrash(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		handler func(context.Context, *twice.Job[emailArgs]) error
	}{
		{"after the effect", func(context.Context, *twice.Job[emailArgs]) error { return nil }},
		{"after a failed effect", func(context.Context, *twice.Job[emailArgs]) error { return errors.New("connection reset") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := &lostOutcomeStore{Store: newStore(t)}
			var calls atomic.Int32
			reg := twice.NewRegistry()
			twice.MustRegister(reg, twice.HandlerFunc[emailArgs](func(ctx context.Context, job *twice.Job[emailArgs]) error {
				calls.Add(1)
				return tc.handler(ctx, job)
			}), &twice.KindOpts{Strategy: twice.ClaimBefore, MaxAttempts: 5})
			cfg := testConfig(reg)
			// The lost outcome costs one lease; 3 s (not 1 s) keeps the
			// redelivery's own lease through a loaded -race run, where a
			// 1 s lease was seen to expire before its outcome was written.
			cfg.LeaseDuration, cfg.RescueInterval = 3*time.Second, 50*time.Millisecond
			client := startClient(t, store, cfg)
			res, err := client.Enqueue(context.Background(), emailArgs{UserID: 7, Key: "charge-crash"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			dead := waitJob(t, store, res.Job.ID, "dead", isState(twicetype.JobStateDead))
			if calls.Load() != 1 {
				t.Errorf("handler ran %d times, want 1: the redelivery must not run it again", calls.Load())
			}
			// The first attempt's error is the rescuer's "lease expired".
			if dead.Attempt != 2 || len(dead.Errors) != 2 {
				t.Fatalf("dead job: attempt %d, errors %v; want the second attempt dead-lettered", dead.Attempt, dead.Errors)
			}
			msg := dead.Errors[1].Error
			for _, want := range []string{"may have happened", "lease epoch 1", "twice markers release " + emailHandler + " charge-crash"} {
				if !strings.Contains(msg, want) {
					t.Errorf("dead job's error %q does not say %q", msg, want)
				}
			}
			if !markerProcessed(t, store, emailHandler, "charge-crash") {
				t.Error("the claim was released: a retry would repeat a maybe-applied effect")
			}
		})
	}
}

// TestClaimBeforeRedeliveredTwinIsNoOp: in redelivery mode the second
// delivery of a ClaimBefore job carries the same lease epoch as the first,
// so finding the first one's claim is a duplicate, not a crash.
func TestClaimBeforeRedeliveredTwinIsNoOp(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	var calls atomic.Int32
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[emailArgs](func(_ context.Context, _ *twice.Job[emailArgs]) error {
		calls.Add(1)
		return nil
	}), &twice.KindOpts{Strategy: twice.ClaimBefore})
	cfg := testConfig(reg)
	cfg.Redeliver = true
	client := startClient(t, store, cfg)
	for i := range 6 { // redelivery is concurrent half the time
		key := fmt.Sprintf("twin-%d", i)
		res, err := client.Enqueue(context.Background(), emailArgs{UserID: 1, Key: key}, nil)
		if err != nil {
			t.Fatal(err)
		}
		waitJob(t, store, res.Job.ID, "completed", isState(twicetype.JobStateCompleted))
	}
	if calls.Load() != 6 {
		t.Errorf("handler ran %d times for 6 jobs delivered twice each, want 6", calls.Load())
	}
}

func TestNoneRunsEveryDelivery(t *testing.T) {
	t.Parallel()
	var called atomic.Int32
	env := setupStrategy(t, twice.None, 0, func(_ context.Context, _ *twice.Job[emailArgs]) error {
		called.Add(1)
		return nil
	})
	a := env.enqueue(t, "img-1")
	b := env.enqueue(t, "img-1")
	waitJob(t, env.store, a.ID, "completed", isState(twicetype.JobStateCompleted))
	waitJob(t, env.store, b.ID, "completed", isState(twicetype.JobStateCompleted))
	if called.Load() != 2 || len(env.log.get()) != 0 {
		t.Errorf("calls = %d, marker calls = %v; want 2 runs and no marker use", called.Load(), env.log.get())
	}
}
