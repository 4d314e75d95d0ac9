package twicetest_test

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetest"
	"github.com/twicejobs/twice/twicetype"
)

type checkoutArgs struct {
	Order string
}

func (checkoutArgs) Kind() string             { return "checkout.steps.v1" }
func (a checkoutArgs) IdempotencyKey() string { return "checkout-" + a.Order }

// steppedCase is a checkout of three steps, one per strategy: a charge and
// an email outside the store (counted in memory), a reservation row in
// the store's database. swallow makes the handler ignore the charge step's
// error and go on, a bug the step crashes must catch.
func steppedCase(swallow bool) twicetest.Case[checkoutArgs] {
	var mu sync.Mutex
	counts := map[string]int{}
	add := func(step string) {
		mu.Lock()
		defer mu.Unlock()
		counts[step]++
	}
	return twicetest.Case[checkoutArgs]{
		Register: func(reg *twice.Registry) error {
			return twice.Register(reg, twice.HandlerFunc[checkoutArgs](func(ctx context.Context, job *twice.Job[checkoutArgs]) error {
				if _, err := twice.Step(ctx, "charge", twice.ClaimBefore, func(context.Context) (string, error) {
					add("charge")
					return "ch_1", nil
				}); err != nil && !swallow {
					return err
				}
				if _, err := twice.Step(ctx, "reserve", twice.Transactional, func(ctx context.Context) (int, error) {
					_, err := twice.StepSQLTx(ctx).ExecContext(ctx, `INSERT INTO reservations VALUES (?)`, job.Args.Order)
					return 1, err
				}); err != nil {
					return err
				}
				_, err := twice.Step(ctx, "email", twice.ClaimAfter, func(context.Context) (bool, error) {
					add("email")
					return true, nil
				})
				return err
			}), &twice.KindOpts{Strategy: twice.None, HandlerName: "checkout"})
		},
		Args: checkoutArgs{Order: "o-9"},
		Setup: func(ctx context.Context, s twicestore.Store) error {
			return inTx(ctx, s, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, `CREATE TABLE reservations (order_id TEXT NOT NULL)`)
				return err
			})
		},
		// The handler converges to one completed checkout.
		Effects: func(context.Context, twicestore.Store) (int, error) { return 1, nil },
		StepEffects: func(ctx context.Context, s twicestore.Store) (map[string]int, error) {
			mu.Lock()
			out := map[string]int{"charge": counts["charge"], "email": counts["email"]}
			mu.Unlock()
			var n int
			err := inTx(ctx, s, func(tx *sql.Tx) error {
				return tx.QueryRowContext(ctx, `SELECT count(*) FROM reservations`).Scan(&n)
			})
			out["reserve"] = n
			return out, err
		},
	}
}

// TestRunTwiceCrashesAtEveryStepBoundary: RunTwice finds a handler's
// steps and crashes its first delivery at each boundary of each: the
// charge's four, the reservation's three and the email's three. Each
// redelivery resumes at the first unfinished step: every step's effect
// once (the email's twice when its claim was lost), or a dead letter
// when the charge's claim was left unfinished.
func TestRunTwiceCrashesAtEveryStepBoundary(t *testing.T) {
	t.Parallel()
	rep := twicetest.RunTwice(t, steppedCase(false))
	var crashes []twicetest.ScenarioReport
	for _, s := range rep.Scenarios {
		if strings.HasPrefix(s.Name, twicetest.ScenarioCrashStep) {
			crashes = append(crashes, s)
		}
	}
	if len(crashes) != 10 {
		t.Fatalf("%d step crash scenarios, want 10:\n%s", len(crashes), rep)
	}
	for _, s := range crashes {
		dead := strings.Contains(s.Name, `"charge" between`)
		want := twicetype.JobStateCompleted
		if dead {
			want = twicetype.JobStateDead
		}
		if s.Outcome != want || s.Deliveries < 2 || s.Broken {
			t.Errorf("%s: job %s after %d deliveries, broken %v; want %s after a redelivery", s.Name, s.Outcome, s.Deliveries, s.Broken, want)
		}
	}
	t.Log(rep)
}

// TestRunTwiceCatchesASwallowedStepError: a handler that ignores the
// charge step's error completes where a person had to decide; the crash
// between the charge's claim and its effect reports it.
func TestRunTwiceCatchesASwallowedStepError(t *testing.T) {
	t.Parallel()
	ft := &fakeTB{TB: t}
	rep := twicetest.RunTwice(ft, steppedCase(true))
	t.Log(rep)
	found := false
	for _, e := range ft.errs {
		if strings.Contains(e, `charge\" between its claim and its effect`) && strings.Contains(e, "dead-lettered for a person") {
			found = true
		}
	}
	if !found {
		t.Fatalf("errors = %q; want the crash between the charge's claim and its effect reported", ft.errs)
	}
}
