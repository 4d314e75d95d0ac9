package twicetest

import (
	"context"
	"errors"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// The seed's three invariants of a marker-guarded handler, as ready-made
// assertions. Each runs the registration through the real runtime on a
// fresh store (or Case.Store), like RunTwice, and fails t with a message
// naming the invariant and what was observed.
const (
	InvariantAlreadyProcessed  = "already processed: handler not called, nothing else touched"
	InvariantEffectBeforeClaim = "success: the effect happens before the claim"
	InvariantFailedNoClaim     = "failed effect: no claim, so the retry really re-runs"
)

// errInjectedFailure is the failure FailedEffectLeavesNoClaim puts in
// place of the handler's first attempt.
var errInjectedFailure = errors.New("twicetest: injected failure of the effect")

// AlreadyProcessed checks that a message whose marker is already claimed
// completes as a no-op: the handler is not called, Case.Effects does not
// change, and the claim is not rewritten. It delivers the message once,
// which claims the marker, then delivers a copy and checks the copy. It
// applies to every strategy that keeps a marker (all but None).
func AlreadyProcessed[T twice.Args](t testing.TB, c Case[T]) {
	t.Helper()
	r := newInvariantRunner(t, c)
	p := newProbe(r.kind)
	store := r.stores(1, p)[0]
	client, stop := r.start(store)
	defer stop()
	msg := newMessageID("processed")
	r.await(store, InvariantAlreadyProcessed, false, r.enqueue(client, msg, 1)...)
	strategy, m := p.strategy(), p.seenMarker()
	if strategy == twice.None || m == nil {
		t.Errorf("twicetest: kind %q, invariant %q: strategy none keeps no marker, so nothing can be already processed; register a marker strategy, or prove convergence with RunTwice",
			r.kind, InvariantAlreadyProcessed)
		return
	}
	claim := r.peek(store.Store, m)
	if claim == nil {
		t.Fatalf("twicetest: kind %q, invariant %q: the first delivery completed but left no claim on marker %s/%s",
			r.kind, InvariantAlreadyProcessed, m.Handler, m.Key)
	}
	effects, calls := r.effects(store), p.handlerCalls()

	ids := r.enqueue(client, msg, 1)
	r.await(store, InvariantAlreadyProcessed, false, ids...)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("twicetest: kind %q, strategy %s, invariant %q: "+format,
			append([]any{r.kind, strategy, InvariantAlreadyProcessed}, args...)...)
	}
	if n := p.handlerCalls() - calls; n != 0 {
		fail("the handler was called %d times for a message already processed", n)
	}
	if n := r.effects(store) - effects; n != 0 {
		fail("Effects changed by %d for a message already processed", n)
	}
	if after := r.peek(store.Store, m); after == nil || !after.ProcessedAt.Equal(claim.ProcessedAt) || after.JobID != claim.JobID {
		fail("the claim was rewritten or removed: before %+v, after %+v", claim, after)
	}
	if row := r.job(store, ids[0]); row.Note != "already processed" {
		fail("the copy completed with note %q, want \"already processed\"", row.Note)
	}
}

// EffectBeforeClaim checks that a successful delivery claims its marker
// only after its effect happened: when the handler returns, Case.Effects
// already shows the effect and the marker is not yet claimed; once the job
// completes, the marker is claimed. That is ClaimAfter's order (duplicates
// over loss). A Transactional kind passes when effect and claim are both
// there after the commit, which writes them together; ClaimBefore claims
// first by design and None keeps no marker, so both fail it.
func EffectBeforeClaim[T twice.Args](t testing.TB, c Case[T]) {
	t.Helper()
	r := newInvariantRunner(t, c)
	p := newProbe(r.kind)
	store := r.stores(1, p)[0]
	type sample struct {
		taken, claimed bool
		effects        int
		err            error
	}
	var at sample // at the handler's return, on its first success
	p.around = func(ctx context.Context, _ *twicetype.JobRow, next func(context.Context) error) error {
		err := next(ctx)
		if err != nil || at.taken || p.strategy() != twice.ClaimAfter {
			return err
		}
		at.taken = true
		at.effects, at.err = c.Effects(ctx, store.Store)
		at.claimed = r.peek(store.Store, p.seenMarker()) != nil
		return nil
	}
	client, stop := r.start(store)
	defer stop()
	before := r.effects(store)
	r.await(store, InvariantEffectBeforeClaim, false, r.enqueue(client, newMessageID("effect"), 1)...)
	stop()
	strategy := p.strategy()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("twicetest: kind %q, strategy %s, invariant %q: "+format,
			append([]any{r.kind, strategy, InvariantEffectBeforeClaim}, args...)...)
	}
	switch strategy {
	case twice.ClaimBefore:
		fail("claim-before claims the marker before the effect by design (loss over duplicates); an effect that must not be lost, like the seed's email, is registered ClaimAfter")
		return
	case twice.None:
		fail("strategy none keeps no marker; register ClaimAfter for a claim after the effect")
		return
	case twice.ClaimAfter:
		switch {
		case !at.taken:
			fail("the handler never returned success")
		case at.err != nil:
			t.Fatalf("twicetest: Case.Effects: %v", at.err)
		case at.effects <= before:
			fail("when the handler returned, Effects was %d, as before it ran: the effect was not visible before the claim", at.effects)
		case at.claimed:
			fail("the marker was already claimed when the handler returned: the claim came before the effect")
		}
	}
	if m := p.seenMarker(); m == nil || r.peek(store.Store, m) == nil {
		fail("the job completed but its marker was not claimed")
	}
	if after := r.effects(store); after <= before {
		fail("the job completed but Effects did not change (%d)", after)
	}
}

// FailedEffectLeavesNoClaim checks that a failed attempt leaves no claim,
// so the retry really runs the effect again: the first attempt fails (the
// failure is injected in place of the handler, which is not called), and
// the retry must call the handler and produce the effect. For ClaimBefore
// the failure is injected as twice.NotApplied, the one failure that
// releases its claim; any other failure of a ClaimBefore kind keeps the
// claim and dead-letters the job by design. When the kind allows one
// attempt only, the job is dead after the failure and only the absence of
// a claim is checked. None keeps no marker and fails it.
func FailedEffectLeavesNoClaim[T twice.Args](t testing.TB, c Case[T]) {
	t.Helper()
	r := newInvariantRunner(t, c)
	p := newProbe(r.kind)
	store := r.stores(1, p)[0]
	var retryClaimed, retried bool // at the retry's start: was a claim there?
	p.around = func(ctx context.Context, job *twicetype.JobRow, next func(context.Context) error) error {
		if job.Attempt == 1 {
			if p.strategy() == twice.ClaimBefore {
				return twice.NotApplied(errInjectedFailure)
			}
			return errInjectedFailure
		}
		if !retried && p.strategy() == twice.ClaimAfter {
			retried = true
			retryClaimed = r.peek(store.Store, p.seenMarker()) != nil
		}
		return next(ctx)
	}
	client, stop := r.start(store)
	defer stop()
	before := r.effects(store)
	ids := r.enqueue(client, newMessageID("failed"), 1)
	final := r.await(store, InvariantFailedNoClaim, true, ids...)
	stop()
	strategy := p.strategy()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("twicetest: kind %q, strategy %s, invariant %q: "+format,
			append([]any{r.kind, strategy, InvariantFailedNoClaim}, args...)...)
	}
	m := p.seenMarker()
	if strategy == twice.None || m == nil {
		fail("strategy none keeps no marker; register a marker strategy")
		return
	}
	row := r.job(store, ids[0])
	if final == twicetype.JobStateDead {
		if row.MaxAttempts > 1 {
			fail("the job was dead-lettered after the injected failure instead of retried: %s", lastError(row))
		}
		if r.peek(store.Store, m) != nil {
			fail("the failed attempt left a claim on marker %s/%s", m.Handler, m.Key)
		}
		return
	}
	if retryClaimed {
		fail("the failed attempt left a claim: at the retry marker %s/%s was already claimed", m.Handler, m.Key)
	}
	if n := p.handlerCalls(); n != 2 { // the injected failure, then the retry
		fail("the retry did not call the handler (%d calls in all, want the failed attempt and the retry)", n)
	}
	if after := r.effects(store); after <= before {
		fail("the retry completed the job but Effects did not change (%d): the effect never ran", after)
	}
	if r.peek(store.Store, m) == nil {
		fail("the retry succeeded but left no claim on marker %s/%s", m.Handler, m.Key)
	}
}

// newInvariantRunner checks c and returns a runner for one invariant.
func newInvariantRunner[T twice.Args](t testing.TB, c Case[T]) *runner[T] {
	t.Helper()
	if c.Register == nil || c.Effects == nil {
		t.Fatalf("twicetest: Case.Register and Case.Effects are required")
	}
	return &runner[T]{t: t, c: c, kind: c.Args.Kind()}
}

// peek reads marker m, returning nil when it is not claimed.
func (r *runner[T]) peek(store twicestore.Store, m *twicestore.MarkerParams) *twicetype.Marker {
	r.t.Helper()
	if m == nil {
		return nil
	}
	res, err := store.MarkerPeek(context.Background(), &twicestore.MarkerParams{Handler: m.Handler, Key: m.Key})
	if err != nil {
		r.t.Fatalf("twicetest: peek marker %s/%s: %v", m.Handler, m.Key, err)
	}
	return res.Marker
}

// job reads one job.
func (r *runner[T]) job(store twicestore.Store, id int64) *twicetype.JobRow {
	r.t.Helper()
	row, err := store.JobGet(context.Background(), &twicestore.JobGetParams{ID: id})
	if err != nil {
		r.t.Fatalf("twicetest: get job %d: %v", id, err)
	}
	return row
}
