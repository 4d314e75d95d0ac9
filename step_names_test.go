package twice_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

type loopArgs struct{ Items []string }

func (loopArgs) Kind() string { return "test.steploop.v1" }

// TestStepNameReusedInOneDelivery: a second twice.Step of the same name in
// one delivery is refused with ErrInvalidInput and an error that says how
// to name steps in a loop; a loop naming each step after its item runs
// each one. Before, the second call got the first's receipt back and its
// function never ran: a loop of three charges charged once.
func TestStepNameReusedInOneDelivery(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	var charges atomic.Int32
	stepErr := make(chan error, 1)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[loopArgs](func(ctx context.Context, j *twice.Job[loopArgs]) error {
		for _, it := range j.Args.Items {
			name := "charge"
			if strings.HasPrefix(it, "named") {
				name = "charge:" + it
			}
			if _, err := twice.Step(ctx, name, twice.ClaimAfter, func(context.Context) (string, error) {
				charges.Add(1)
				return "ch_" + it, nil
			}); err != nil {
				stepErr <- err
				return err
			}
		}
		return nil
	}), &twice.KindOpts{Strategy: twice.None})
	c := startClient(t, store, testConfig(reg))

	res, err := c.Enqueue(context.Background(), loopArgs{Items: []string{"a", "b", "c"}}, &twice.EnqueueOpts{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	row := waitJob(t, store, res.Job.ID, "dead", isState(twicetype.JobStateDead))
	err = <-stepErr
	if !errors.Is(err, twice.ErrInvalidInput) || !strings.Contains(err.Error(), `"charge:"+`) {
		t.Errorf("second step of one name: %v, want ErrInvalidInput saying how to name steps in a loop", err)
	}
	if n := charges.Load(); n != 1 {
		t.Errorf("%d charges, want 1: the reused name runs nothing", n)
	}
	if len(row.Errors) != 1 || !strings.Contains(row.Errors[0].Error, "used twice in one delivery") {
		t.Errorf("errors %v, want the reused name explained", row.Errors)
	}

	charges.Store(0)
	res, err = c.Enqueue(context.Background(), loopArgs{Items: []string{"named1", "named2", "named3"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, store, res.Job.ID, "completed", isState(twicetype.JobStateCompleted))
	if n := charges.Load(); n != 3 {
		t.Errorf("%d charges for three steps named after their items, want 3", n)
	}
}

type badStepArgs struct{ Mode string }

func (badStepArgs) Kind() string { return "test.badstep.v1" }

// TestStepBadBytesRefused: a step name or a result that no driver can
// store (a NUL byte, bytes that are not UTF-8) is refused before it
// reaches the database, with ErrInvalidInput, on both drivers alike;
// StepSettle refuses them too. Before, PostgreSQL refused the write
// (SQLSTATE 22021) and the job died of a raw database error, while SQLite
// stored the bytes.
func TestStepBadBytesRefused(t *testing.T) {
	t.Parallel()
	for name, open := range stepStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := open(t)
			errs := make(chan error, 1)
			reg := twice.NewRegistry()
			twice.MustRegister(reg, twice.HandlerFunc[badStepArgs](func(ctx context.Context, j *twice.Job[badStepArgs]) error {
				var err error
				switch j.Args.Mode {
				case "name with NUL":
					_, err = twice.Step(ctx, "charge\x00", twice.ClaimBefore, func(context.Context) (int, error) { return 1, nil })
				case "name not UTF-8":
					_, err = twice.Step(ctx, "charge\xff", twice.ClaimAfter, func(context.Context) (int, error) { return 1, nil })
				case "result not UTF-8":
					_, err = twice.Step(ctx, "charge", twice.ClaimBefore, func(context.Context) (json.RawMessage, error) {
						return json.RawMessage("\"caf\xe9\""), nil
					})
				}
				errs <- err
				return twice.NotApplied(err)
			}), &twice.KindOpts{Strategy: twice.None})
			c := startClient(t, store, testConfig(reg))
			for _, mode := range []string{"name with NUL", "name not UTF-8", "result not UTF-8"} {
				res, err := c.Enqueue(context.Background(), badStepArgs{Mode: mode}, &twice.EnqueueOpts{MaxAttempts: 1})
				if err != nil {
					t.Fatal(err)
				}
				err = <-errs
				if !errors.Is(err, twice.ErrInvalidInput) || !strings.Contains(err.Error(), "UTF-8") {
					t.Errorf("%s: %v, want ErrInvalidInput naming the bad bytes", mode, err)
				}
				waitJob(t, store, res.Job.ID, "dead", isState(twicetype.JobStateDead))
			}
			res, err := c.Enqueue(context.Background(), badStepArgs{Mode: "none"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-errs; err != nil { // the job exists and ran
				t.Fatal(err)
			}
			for what, settle := range map[string]func() error{
				"name": func() error { return c.StepSettle(context.Background(), res.Job.ID, "charge\x00", nil) },
				"receipt": func() error {
					return c.StepSettle(context.Background(), res.Job.ID, "charge", json.RawMessage("\"\xff\""))
				},
			} {
				if err := settle(); !errors.Is(err, twice.ErrInvalidInput) {
					t.Errorf("StepSettle with a bad %s: %v, want ErrInvalidInput", what, err)
				}
			}
		})
	}
}

// TestStepSettleRefusedWhileRunning: a person's StepSettle of a step whose
// job is running (its delivery is in the step's effect) is refused with
// ErrJobRunning and changes nothing, so the effect runs once and the step
// keeps the delivery's own receipt. Before, the settle went through: the
// claim was deleted (or marked done) under the running delivery, and the
// ClaimBefore effect ran again on the next delivery.
func TestStepSettleRefusedWhileRunning(t *testing.T) {
	t.Parallel()
	for name, open := range stepStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := open(t)
			var charges atomic.Int32
			inEffect, release := make(chan struct{}), make(chan struct{})
			reg := twice.NewRegistry()
			twice.MustRegister(reg, twice.HandlerFunc[loopArgs](func(ctx context.Context, _ *twice.Job[loopArgs]) error {
				_, err := twice.Step(ctx, "charge", twice.ClaimBefore, func(context.Context) (string, error) {
					if charges.Add(1) == 1 {
						close(inEffect)
						<-release
					}
					return "ch_live", nil
				})
				return err
			}), &twice.KindOpts{Strategy: twice.None})
			c := startClient(t, store, testConfig(reg))
			res, err := c.Enqueue(context.Background(), loopArgs{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			waitfor.Closed(t, inEffect, "the step's effect to start")
			for _, receipt := range []any{nil, "ch_settled"} {
				err := c.StepSettle(context.Background(), res.Job.ID, "charge", receipt)
				if !errors.Is(err, twice.ErrJobRunning) || !strings.Contains(err.Error(), "once the job is dead") {
					t.Errorf("StepSettle(%v) while the step runs: %v, want ErrJobRunning saying when to settle", receipt, err)
				}
			}
			close(release)
			waitJob(t, store, res.Job.ID, "completed", isState(twicetype.JobStateCompleted))
			if n := charges.Load(); n != 1 {
				t.Errorf("%d charges, want 1", n)
			}
			if err := c.StepSettle(context.Background(), res.Job.ID, "charge", nil); !errors.Is(err, twicestore.ErrNotFound) {
				t.Errorf("StepSettle of the finished step: %v, want ErrNotFound", err)
			}
		})
	}
}
