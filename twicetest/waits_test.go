package twicetest_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicetest"
)

type payoutArgs struct{ PayoutID int64 }

func (payoutArgs) Kind() string             { return "payout.send.v1" }
func (a payoutArgs) IdempotencyKey() string { return "payout-" + strconv.FormatInt(a.PayoutID, 10) }

// payoutCase waits for a reviewer's approval and a one-second cool-off,
// then writes its ledger row in the job's transaction.
func payoutCase() twicetest.Case[payoutArgs] {
	c := creditCase()
	return twicetest.Case[payoutArgs]{
		Register: func(reg *twice.Registry) error {
			return twice.Register(reg, twice.HandlerFunc[payoutArgs](func(ctx context.Context, job *twice.Job[payoutArgs]) error {
				ok, err := twice.AwaitSignal[bool](ctx, "approve", twice.NoTimeout)
				if err != nil {
					return err
				}
				if !ok {
					return twice.Cancel(errors.New("refused"))
				}
				if err := twice.Sleep(ctx, "cool-off", time.Hour); err != nil {
					return err
				}
				_, err = job.SQLTx().ExecContext(ctx, `INSERT INTO ledger (credit_id) VALUES (?)`, job.Args.PayoutID)
				return err
			}), &twice.KindOpts{Strategy: twice.Transactional})
		},
		Args:    payoutArgs{PayoutID: 9},
		Signals: map[string]any{"approve": true},
		Setup:   c.Setup,
		Effects: c.Effects,
	}
}

// TestWaitsAreAnswered: a handler that awaits a signal and sleeps runs
// through every scenario, each park answered (the signal sent twice, the
// sleep's timer fired), and keeps its promise: one ledger row.
func TestWaitsAreAnswered(t *testing.T) {
	t.Parallel()
	rep := twicetest.RunTwice(t, payoutCase())
	if rep.Strategy != twice.Transactional {
		t.Errorf("strategy = %s, want transactional", rep.Strategy)
	}
	for _, s := range rep.Scenarios {
		if s.Effects != 1 {
			t.Errorf("%s: %d effects, want 1", s.Name, s.Effects)
		}
	}
}
