package twicetest_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetest"
)

// invariant is one of the ready-made assertions.
type invariant struct {
	name  string
	check func(testing.TB)
}

// invariantsOf binds the three assertions to c.
func invariantsOf[T twice.Args](c twicetest.Case[T]) []invariant {
	return []invariant{
		{twicetest.InvariantAlreadyProcessed, func(tb testing.TB) { twicetest.AlreadyProcessed(tb, c) }},
		{twicetest.InvariantEffectBeforeClaim, func(tb testing.TB) { twicetest.EffectBeforeClaim(tb, c) }},
		{twicetest.InvariantFailedNoClaim, func(tb testing.TB) { twicetest.FailedEffectLeavesNoClaim(tb, c) }},
	}
}

// failures runs check against a fakeTB and returns what it reported.
func failures(t *testing.T, check func(testing.TB)) []string {
	t.Helper()
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(f)
	}()
	waitfor.Closed(t, done, "the check to return")
	f.mu.Lock()
	defer f.mu.Unlock()
	return append(append([]string(nil), f.fatals...), f.errs...)
}

func TestInvariantsHold(t *testing.T) {
	t.Parallel()
	singleAttempt := mustEmail(twice.ClaimAfter)
	singleAttempt.Register = func(reg *twice.Registry) error {
		return twice.Register(reg, twice.HandlerFunc[welcomeArgs](func(context.Context, *twice.Job[welcomeArgs]) error { return nil }),
			&twice.KindOpts{Strategy: twice.ClaimAfter, MaxAttempts: 1})
	}
	for name, checks := range map[string][]invariant{
		// Each check gets a case of its own: the checks run in parallel,
		// and one case's effect counter shared by three of them let one
		// check see another's effect.
		"claim-after email": {
			invariantsOf(mustEmail(twice.ClaimAfter))[0],
			invariantsOf(mustEmail(twice.ClaimAfter))[1],
			invariantsOf(mustEmail(twice.ClaimAfter))[2],
		},
		"transactional":  invariantsOf(creditCase()),
		"single attempt": invariantsOf(singleAttempt)[2:], // dead after the failure, with no claim
		"claim-before":   {invariantsOf(mustEmail(twice.ClaimBefore))[0], invariantsOf(mustEmail(twice.ClaimBefore))[2]},
	} {
		for _, inv := range checks {
			t.Run(name+"/"+inv.name, func(t *testing.T) {
				t.Parallel()
				inv.check(t)
			})
		}
	}
}

func mustEmail(s twice.Strategy) twicetest.Case[welcomeArgs] {
	c, _ := emailCase(s, 1)
	return c
}

// TestInvariantsCatch: each assertion fails, saying why, for a
// registration that breaks it.
func TestInvariantsCatch(t *testing.T) {
	t.Parallel()
	none := upsertCase(false)
	for _, tc := range []struct {
		name  string
		check func(testing.TB)
		want  []string
	}{
		{"none has no marker to be processed", invariantsOf(none)[0].check, []string{twicetest.InvariantAlreadyProcessed, "strategy none keeps no marker"}},
		{"none has no claim", invariantsOf(none)[1].check, []string{twicetest.InvariantEffectBeforeClaim, "strategy none keeps no marker"}},
		{"none has no claim to leave", invariantsOf(none)[2].check, []string{twicetest.InvariantFailedNoClaim, "strategy none keeps no marker"}},
		{"claim-before claims first", invariantsOf(mustEmail(twice.ClaimBefore))[1].check, []string{"strategy claim-before", "before the effect by design", "ClaimAfter"}},
		{"fire-and-forget send", func(tb testing.TB) { twicetest.EffectBeforeClaim(tb, fireAndForget(t)) },
			[]string{"strategy claim-after", "was not visible before the claim"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			errs := failures(t, tc.check)
			if len(errs) == 0 {
				t.Fatal("passed")
			}
			for _, want := range tc.want {
				if !strings.Contains(errs[0], want) {
					t.Errorf("failure %q does not say %q", errs[0], want)
				}
			}
			t.Log(strings.Join(errs, "\n"))
		})
	}
}

// fireAndForget is a ClaimAfter email handler that hands the send to a
// goroutine and returns at once: the claim can then be written before the
// email goes out, and a crash in between loses it. The goroutines send
// when the test ends.
func fireAndForget(t *testing.T) twicetest.Case[welcomeArgs] {
	var sent atomic.Int64
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	return twicetest.Case[welcomeArgs]{
		Register: func(reg *twice.Registry) error {
			return twice.Register(reg, twice.HandlerFunc[welcomeArgs](func(_ context.Context, _ *twice.Job[welcomeArgs]) error {
				go func() {
					<-release
					sent.Add(1)
				}()
				return nil
			}), &twice.KindOpts{Strategy: twice.ClaimAfter})
		},
		Args:    welcomeArgs{UserID: 9},
		Effects: func(context.Context, twicestore.Store) (int, error) { return int(sent.Load()), nil },
	}
}
