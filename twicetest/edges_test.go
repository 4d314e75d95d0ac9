package twicetest_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetest"
)

type receiptArgs struct{ N int }

func (receiptArgs) Kind() string { return "edges.receipt.v1" }

// thenCase sends one email per delivery and records two continuations.
func thenCase(s twice.Strategy, claimed int) twicetest.Case[welcomeArgs] {
	var sent atomic.Int64
	return twicetest.Case[welcomeArgs]{
		Register: func(reg *twice.Registry) error {
			return twice.Register(reg, twice.HandlerFunc[welcomeArgs](func(ctx context.Context, job *twice.Job[welcomeArgs]) error {
				sent.Add(1)
				if err := job.Then(receiptArgs{1}, nil); err != nil {
					return err
				}
				return twice.EnqueueNext(ctx, receiptArgs{2}, nil)
			}), &twice.KindOpts{Strategy: s})
		},
		Args: welcomeArgs{UserID: 7},
		Effects: func(context.Context, twicestore.Store) (int, error) {
			if s == twice.None { // None promises a state: sent, or not
				return int(min(sent.Load(), 1)), nil
			}
			return int(sent.Load()), nil
		},
		Continuations: claimed,
	}
}

// TestEachEdgeFiredOnce: in a row, concurrently and through a crash, every
// completed job inserted its two continuations once, and no-op copies none.
func TestEachEdgeFiredOnce(t *testing.T) {
	t.Parallel()
	for _, s := range []twice.Strategy{twice.ClaimAfter, twice.ClaimBefore, twice.None} {
		t.Run(s.String(), func(t *testing.T) {
			t.Parallel()
			twicetest.RunTwice(t, thenCase(s, 2))
		})
	}
}

// TestEdgeCountMismatchIsReported: a case that claims more continuations
// than the handler records fails, saying an edge never fired.
func TestEdgeCountMismatchIsReported(t *testing.T) {
	t.Parallel()
	got := failures(t, func(tb testing.TB) { twicetest.RunTwice(tb, thenCase(twice.None, 3)) })
	if len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), "inserted 2 continuations, want 3: an edge fired never") {
		t.Fatalf("failures = %q, want the missing edge reported", got)
	}
}
