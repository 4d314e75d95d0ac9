package twice_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

type sumArgs struct {
	A, B int
	Fail bool
}

func (sumArgs) Kind() string { return "math.sum.v1" }

type sumResult struct {
	Sum int `json:"sum"`
}

func sumHandler(release <-chan struct{}) twice.HandlerFunc[sumArgs] {
	return func(ctx context.Context, job *twice.Job[sumArgs]) error {
		if release != nil {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := twice.RecordOutput(ctx, sumResult{Sum: job.Args.A + job.Args.B}); err != nil {
			return err
		}
		if job.Args.Fail {
			return twice.Permanent(errors.New("the sum is wrong today"))
		}
		return nil
	}
}

// TestEnqueueAndWait: Wait returns a completed job's output (woken by
// NOTIFY on PostgreSQL, polling on SQLite); a job still running has no
// result; a dead job's Wait says it is dead, with its error, and keeps no
// output of the failed attempt.
func TestEnqueueAndWait(t *testing.T) {
	t.Parallel()
	for driver, open := range stepStores(t) {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			store := open(t)
			release := make(chan struct{})
			reg := twice.NewRegistry()
			twice.MustRegister(reg, sumHandler(release), &twice.KindOpts{Strategy: twice.None, MaxAttempts: 1})
			client := startClient(t, store, testConfig(reg))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			res, err := client.Enqueue(ctx, sumArgs{A: 2, B: 3}, nil)
			if err != nil {
				t.Fatal(err)
			}
			waitJob(t, store, res.Job.ID, "running", isState(twicetype.JobStateRunning))
			if r, err := client.JobResult(ctx, res.Job.ID); !errors.Is(err, twice.ErrJobNotCompleted) ||
				r.State != twicetype.JobStateRunning || !strings.Contains(err.Error(), "not finished yet") {
				t.Fatalf("result of a running job = %+v, %v; want ErrJobNotCompleted saying running", r, err)
			}
			waited := make(chan error, 1)
			var got sumResult
			go func() {
				r, err := client.Wait(ctx, res.Job.ID)
				if err == nil {
					err = r.Decode(&got)
				}
				waited <- err
			}()
			close(release)
			if err := <-waited; err != nil || got.Sum != 5 {
				t.Fatalf("Wait = %+v, %v; want sum 5", got, err)
			}

			r, err := client.EnqueueAndWait(ctx, sumArgs{A: 1, B: 1, Fail: true}, nil)
			if !errors.Is(err, twice.ErrJobNotCompleted) || r.State != twicetype.JobStateDead ||
				!strings.Contains(err.Error(), "the sum is wrong today") || r.Output != nil {
				t.Fatalf("EnqueueAndWait of a failing job = %+v, %v; want dead with its error and no output", r, err)
			}
			if _, err := client.JobResult(ctx, 1<<40); !errors.Is(err, twicestore.ErrNotFound) {
				t.Fatalf("result of no job: %v, want ErrNotFound", err)
			}
			short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancelShort()
			blocked, err := client.Enqueue(ctx, sumArgs{A: 1}, &twice.EnqueueOpts{RunAt: time.Now().Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := client.Wait(short, blocked.Job.ID); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Wait past its deadline: %v, want DeadlineExceeded", err)
			}
		})
	}
}

type stepMisuseArgs struct{ Case string }

func (stepMisuseArgs) Kind() string { return "steps.misuse.v1" }

// TestStepBadInput: misuse of steps and output is a clear error naming the
// culprit, never a silent run.
func TestStepBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := twice.Step(ctx, "charge", twice.ClaimBefore, func(context.Context) (int, error) { return 1, nil }); err == nil ||
		!strings.Contains(err.Error(), "handler's context") {
		t.Errorf("Step outside a handler: %v", err)
	}
	if err := twice.RecordOutput(ctx, 1); err == nil || !strings.Contains(err.Error(), "handler's context") {
		t.Errorf("RecordOutput outside a handler: %v", err)
	}
	if k := twice.EffectKey(ctx, "stripe"); k != "" {
		t.Errorf("EffectKey outside a handler = %q, want empty", k)
	}

	cases := map[string]struct {
		strategy twice.Strategy
		run      func(ctx context.Context) error
		want     string
	}{
		"another strategy": {twice.None, func(ctx context.Context) error {
			if _, err := twice.Step(ctx, "charge", twice.ClaimAfter, func(context.Context) (int, error) { return 1, nil }); err != nil {
				return err
			}
			_, err := twice.Step(ctx, "charge", twice.ClaimBefore, func(context.Context) (int, error) { return 2, nil })
			return err
		}, `step "charge" is used with strategy claim-after and claim-before`},
		"oversized receipt": {twice.None, func(ctx context.Context) error {
			_, err := twice.Step(ctx, "big", twice.ClaimAfter, func(context.Context) (string, error) {
				return strings.Repeat("x", twice.MaxReceiptBytes), nil
			})
			return err
		}, "over twice.MaxReceiptBytes"},
		"oversized output": {twice.None, func(ctx context.Context) error {
			return twice.RecordOutput(ctx, strings.Repeat("x", twice.MaxOutputBytes))
		}, "over twice.MaxOutputBytes"},
		"no name": {twice.None, func(ctx context.Context) error {
			_, err := twice.Step(ctx, "", twice.ClaimAfter, func(context.Context) (int, error) { return 1, nil })
			return err
		}, "a step needs a name"},
		"strategy None": {twice.None, func(ctx context.Context) error {
			_, err := twice.Step(ctx, "x", twice.None, func(context.Context) (int, error) { return 1, nil })
			return err
		}, "strategy none is not for steps"},
		"claim-before step in a Transactional kind": {twice.Transactional, func(ctx context.Context) error {
			_, err := twice.Step(ctx, "charge", twice.ClaimBefore, func(context.Context) (int, error) { return 1, nil })
			return err
		}, "its steps must be Transactional too"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := newStore(t)
			errs := make(chan error, 1)
			reg := twice.NewRegistry()
			twice.MustRegister(reg, twice.HandlerFunc[stepMisuseArgs](func(ctx context.Context, _ *twice.Job[stepMisuseArgs]) error {
				err := tc.run(ctx)
				select {
				case errs <- err:
				default:
				}
				return err
			}), &twice.KindOpts{Strategy: tc.strategy, MaxAttempts: 1})
			client := startClient(t, store, testConfig(reg))
			if _, err := client.Enqueue(context.Background(), stepMisuseArgs{Case: name}, nil); err != nil {
				t.Fatal(err)
			}
			if err := <-errs; err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to say %q", err, tc.want)
			}
		})
	}
}

// TestEffectKeyStable: the effect key is the same for every delivery of
// one message and differs per step name and per message.
func TestEffectKeyStable(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	keys := make(chan [2]string, 4)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[stepMisuseArgs](func(ctx context.Context, job *twice.Job[stepMisuseArgs]) error {
		if k := job.EffectKey("stripe"); k != twice.EffectKey(ctx, "stripe") {
			keys <- [2]string{k, "job.EffectKey differs from twice.EffectKey"}
			return nil
		}
		keys <- [2]string{twice.EffectKey(ctx, "stripe"), twice.EffectKey(ctx, "mailer")}
		return nil
	}), &twice.KindOpts{Strategy: twice.None})
	cfg := testConfig(reg)
	cfg.Redeliver = true // every message is delivered twice
	client := startClient(t, store, cfg)
	ctx := context.Background()
	for _, c := range []string{"a", "b"} {
		if _, err := client.Enqueue(ctx, stepMisuseArgs{Case: c}, &twice.EnqueueOpts{}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[[2]string]int{}
	for range 4 {
		got[<-keys]++
	}
	if len(got) != 2 {
		t.Fatalf("keys = %v; want two distinct pairs, each seen twice", got)
	}
	for k, n := range got {
		if n != 2 || k[0] == k[1] || !strings.HasPrefix(k[0], "twice-") {
			t.Fatalf("keys = %v; want each message's pair twice, distinct per step", got)
		}
	}
}
