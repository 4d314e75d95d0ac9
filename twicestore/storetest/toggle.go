package storetest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// On SQLite a transaction holds the database's only write lock, so the
// transaction check only reads through the store while one is open.
var toggleTests = []test{
	{"SetThenList", testToggleSetList},
	{"KeysCaseInsensitive", testToggleCase},
	{"SetReplaces", testToggleReplace},
	{"DeleteRemoves", testToggleDelete},
	{"ListOrderedByKind", testToggleOrder},
	{"ZeroAtIsNow", testToggleZeroAt},
	{"VisibleAfterCommitOnly", testToggleTx},
	{"EmptyList", testToggleEmpty},
	{"ExpiredLeftOut", testToggleExpiry},
	{"ExpiryAlreadyPast", testToggleExpiryPast},
	{"HistoryRecordsEveryChange", testToggleHistory},
	{"HistoryPreviousOfExpired", testToggleHistoryExpired},
	{"HistoryPages", testToggleHistoryPages},
	{"HistoryInTx", testToggleHistoryTx},
	{"HistoryConcurrentSets", testToggleHistoryConcurrent},
	{"HistoryEmpty", testToggleHistoryEmpty},
}

func (e *env) setToggle(ex twicestore.Executor, tg twicetype.Toggle) {
	e.t.Helper()
	if err := ex.ToggleSet(e.ctx, &twicestore.ToggleSetParams{Toggle: tg}); err != nil {
		e.t.Fatalf("ToggleSet(%s): %v", tg.Kind, err)
	}
}

func (e *env) deleteToggle(ex twicestore.Executor, kind string) {
	e.t.Helper()
	if err := ex.ToggleDelete(e.ctx, &twicestore.ToggleDeleteParams{Kind: kind}); err != nil {
		e.t.Fatalf("ToggleDelete(%s): %v", kind, err)
	}
}

func (e *env) toggles(ex twicestore.Executor) []twicetype.Toggle {
	e.t.Helper()
	res, err := ex.ToggleList(e.ctx, &twicestore.ToggleListParams{})
	if err != nil {
		e.t.Fatalf("ToggleList: %v", err)
	}
	return res.Toggles
}

// checkToggles fails the test unless got and want hold the same toggles in
// the same order, times compared with Equal.
func checkToggles(t *testing.T, what string, got, want []twicetype.Toggle) {
	t.Helper()
	if !slices.EqualFunc(got, want, func(a, b twicetype.Toggle) bool {
		return a.Kind == b.Kind && a.Enabled == b.Enabled && a.Reason == b.Reason &&
			a.By == b.By && a.At.Equal(b.At) && a.ExpiresAt.Equal(b.ExpiresAt)
	}) {
		t.Fatalf("%s: ToggleList =\n%s\nwant\n%s", what, fmtToggles(got), fmtToggles(want))
	}
}

func fmtToggles(ts []twicetype.Toggle) string {
	var b strings.Builder
	for _, tg := range ts {
		fmt.Fprintf(&b, "  %q enabled=%t reason=%q by=%q at=%s expires=%s\n",
			tg.Kind, tg.Enabled, tg.Reason, tg.By, tg.At, tg.ExpiresAt)
	}
	if b.Len() == 0 {
		return "  (none)\n"
	}
	return b.String()
}

func testToggleSetList(t *testing.T, e *env) {
	off := twicetype.Toggle{Kind: "storetest.off.v1", Enabled: false,
		Reason: "provider outage — INC-42", By: "ops@host-1", At: e.base}
	on := twicetype.Toggle{Kind: "storetest.on.v1", Enabled: true, Reason: "", By: "", At: e.at(time.Microsecond)}
	e.setToggle(e.s, off)
	e.setToggle(e.s, on)
	got := e.toggles(e.s)
	checkToggles(t, "after two sets", got, []twicetype.Toggle{off, on})
	for _, tg := range got {
		if tg.At.Location() != time.UTC {
			t.Errorf("toggle %s: At is in %s, want UTC", tg.Kind, tg.At.Location())
		}
	}
}

func testToggleCase(t *testing.T, e *env) {
	e.setToggle(e.s, twicetype.Toggle{Kind: "Balance.Credit.V1", Enabled: false, Reason: "first", By: "a", At: e.base})
	checkToggles(t, "after setting a mixed-case kind", e.toggles(e.s), []twicetype.Toggle{
		{Kind: "balance.credit.v1", Enabled: false, Reason: "first", By: "a", At: e.base},
	})
	second := twicetype.Toggle{Kind: "balance.credit.v1", Enabled: true, Reason: "second", By: "b", At: e.at(time.Minute)}
	e.setToggle(e.s, second)
	checkToggles(t, "after setting the same kind lower-cased", e.toggles(e.s), []twicetype.Toggle{second})

	e.deleteToggle(e.s, "BALANCE.credit.V1")
	checkToggles(t, "after deleting in another case", e.toggles(e.s), nil)
}

func testToggleReplace(t *testing.T, e *env) {
	e.setToggle(e.s, twicetype.Toggle{Kind: "storetest.flip.v1", Enabled: false,
		Reason: "incident", By: "alice@laptop", At: e.base})
	// Every field is replaced, an empty Reason and By included.
	for _, tg := range []twicetype.Toggle{
		{Kind: "storetest.flip.v1", Enabled: true, Reason: "fixed", By: "bob@laptop", At: e.at(time.Hour)},
		{Kind: "storetest.flip.v1", Enabled: false, Reason: "", By: "", At: e.at(2 * time.Hour)},
	} {
		e.setToggle(e.s, tg)
		checkToggles(t, fmt.Sprintf("after setting enabled=%t", tg.Enabled), e.toggles(e.s), []twicetype.Toggle{tg})
	}
}

func testToggleDelete(t *testing.T, e *env) {
	keep := twicetype.Toggle{Kind: "storetest.keep.v1", Enabled: false, Reason: "keep", By: "a", At: e.base}
	e.setToggle(e.s, keep)
	e.setToggle(e.s, twicetype.Toggle{Kind: "storetest.gone.v1", Enabled: false, Reason: "gone", By: "a", At: e.base})
	e.deleteToggle(e.s, "storetest.gone.v1")
	checkToggles(t, "after delete", e.toggles(e.s), []twicetype.Toggle{keep})
	e.deleteToggle(e.s, "storetest.gone.v1")  // deleting twice is not an error
	e.deleteToggle(e.s, "storetest.never.v1") // nor is deleting one never set
	checkToggles(t, "after deleting missing ones", e.toggles(e.s), []twicetype.Toggle{keep})
}

func testToggleOrder(t *testing.T, e *env) {
	// Ordered by the kind's bytes, whatever the database's collation: a
	// locale collation such as glibc's en_US.UTF-8 ignores the dash at first
	// and puts "a-c" after "ab".
	kinds := []string{"storetest.z.v1", "storetest.ab.v1", "storetest.a-c.v1", "storetest.b.v1", "storetest.a.v1"}
	var want []twicetype.Toggle
	for i, k := range kinds {
		tg := twicetype.Toggle{Kind: k, Enabled: i%2 == 0, Reason: k, By: "ops", At: e.at(time.Duration(i) * time.Second)}
		e.setToggle(e.s, tg)
		want = append(want, tg)
	}
	slices.SortFunc(want, func(a, b twicetype.Toggle) int { return strings.Compare(a.Kind, b.Kind) })
	checkToggles(t, "ordering", e.toggles(e.s), want)
}

func testToggleZeroAt(t *testing.T, e *env) {
	before := time.Now().Add(-time.Second)
	e.setToggle(e.s, twicetype.Toggle{Kind: "storetest.now.v1", Enabled: false})
	after := time.Now().Add(time.Second)
	got := e.toggles(e.s)
	if len(got) != 1 {
		t.Fatalf("ToggleList = %d toggles, want 1", len(got))
	}
	if at := got[0].At; at.Before(before) || at.After(after) {
		t.Fatalf("a toggle set with a zero At has At = %s, want the time of the set (%s to %s)", at, before, after)
	}
}

func testToggleTx(t *testing.T, e *env) {
	kept := twicetype.Toggle{Kind: "storetest.kept.v1", Enabled: true, Reason: "kept", By: "a", At: e.base}
	e.setToggle(e.s, kept)

	// Rolled back: a set and a delete inside the transaction leave nothing.
	tx := e.begin()
	rolled := twicetype.Toggle{Kind: "storetest.tx.v1", Enabled: false, Reason: "rolled back", By: "a", At: e.base}
	e.setToggle(tx, rolled)
	e.deleteToggle(tx, kept.Kind)
	checkToggles(t, "inside the transaction", e.toggles(tx), []twicetype.Toggle{rolled})
	checkToggles(t, "outside the open transaction", e.toggles(e.s), []twicetype.Toggle{kept})
	if err := tx.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	checkToggles(t, "after rollback", e.toggles(e.s), []twicetype.Toggle{kept})

	// Committed: visible only once the commit is done.
	tx = e.begin()
	committed := twicetype.Toggle{Kind: "storetest.tx.v1", Enabled: false, Reason: "committed", By: "b", At: e.at(time.Second)}
	e.setToggle(tx, committed)
	checkToggles(t, "outside before commit", e.toggles(e.s), []twicetype.Toggle{kept})
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	checkToggles(t, "after commit", e.toggles(e.s), []twicetype.Toggle{kept, committed})
}

func testToggleEmpty(t *testing.T, e *env) {
	if got := e.toggles(e.s); len(got) != 0 {
		t.Fatalf("ToggleList on a new store =\n%s", fmtToggles(got))
	}
	e.setToggle(e.s, twicetype.Toggle{Kind: "storetest.once.v1", At: e.base})
	e.deleteToggle(e.s, "storetest.once.v1")
	if got := e.toggles(e.s); len(got) != 0 {
		t.Fatalf("ToggleList after deleting the only toggle =\n%s", fmtToggles(got))
	}
}

// togglesAt lists the switches that have not expired at now.
func (e *env) togglesAt(ex twicestore.Executor, now time.Time) []twicetype.Toggle {
	e.t.Helper()
	res, err := ex.ToggleList(e.ctx, &twicestore.ToggleListParams{Now: now})
	if err != nil {
		e.t.Fatalf("ToggleList(Now %s): %v", now, err)
	}
	return res.Toggles
}

func testToggleExpiry(t *testing.T, e *env) {
	forever := twicetype.Toggle{Kind: "storetest.forever.v1", Enabled: false, Reason: "no end", By: "a", At: e.base}
	hour := twicetype.Toggle{Kind: "storetest.hour.v1", Enabled: false, Reason: "maintenance", By: "a",
		At: e.base, ExpiresAt: e.at(time.Hour)}
	e.setToggle(e.s, forever)
	e.setToggle(e.s, hour)

	checkToggles(t, "before the expiry", e.togglesAt(e.s, e.at(time.Hour-time.Microsecond)),
		[]twicetype.Toggle{forever, hour})
	// The switch stops counting at its expiry, not after it.
	checkToggles(t, "at the expiry", e.togglesAt(e.s, e.at(time.Hour)), []twicetype.Toggle{forever})
	checkToggles(t, "after the expiry", e.togglesAt(e.s, e.at(2*time.Hour)), []twicetype.Toggle{forever})

	// A later set without an expiry replaces the expiry too.
	again := twicetype.Toggle{Kind: "storetest.hour.v1", Enabled: true, Reason: "back", By: "b", At: e.at(3 * time.Hour)}
	e.setToggle(e.s, again)
	checkToggles(t, "after setting again without an expiry", e.togglesAt(e.s, e.at(4*time.Hour)),
		[]twicetype.Toggle{forever, again})
}

func testToggleExpiryPast(t *testing.T, e *env) {
	// Refusing a past expiry is the caller's job; the store records it, and
	// the switch is absent at once.
	past := twicetype.Toggle{Kind: "storetest.past.v1", Enabled: false, Reason: "typo", By: "a",
		At: e.base, ExpiresAt: e.at(-time.Minute)}
	e.setToggle(e.s, past)
	if got := e.togglesAt(e.s, e.base); len(got) != 0 {
		t.Fatalf("ToggleList after setting a switch that expired a minute before =\n%s", fmtToggles(got))
	}
	h := e.history(e.s, "storetest.past.v1", 0, 0)
	if len(h) != 1 || h[0].Previous != twicetype.ToggleNone || h[0].New != twicetype.ToggleOff ||
		!h[0].ExpiresAt.Equal(past.ExpiresAt) {
		t.Fatalf("history of a set with a past expiry =\n%s\nwant one change none -> off expiring %s",
			fmtHistory(h), past.ExpiresAt)
	}
	// The next change finds no switch in effect.
	e.deleteToggleBy(e.s, &twicestore.ToggleDeleteParams{Kind: "storetest.past.v1", By: "a", At: e.at(time.Second)})
	if h := e.history(e.s, "storetest.past.v1", 0, 0); h[0].Previous != twicetype.ToggleNone {
		t.Fatalf("a delete of an expired switch recorded previous state %q, want none", h[0].Previous)
	}
}

func (e *env) deleteToggleBy(ex twicestore.Executor, p *twicestore.ToggleDeleteParams) {
	e.t.Helper()
	if err := ex.ToggleDelete(e.ctx, p); err != nil {
		e.t.Fatalf("ToggleDelete(%s): %v", p.Kind, err)
	}
}

// history lists the switch history of kind (every kind's when empty).
func (e *env) history(ex twicestore.Executor, kind string, beforeID int64, limit int) []twicetype.ToggleChange {
	e.t.Helper()
	res, err := ex.ToggleHistory(e.ctx, &twicestore.ToggleHistoryParams{Kind: kind, BeforeID: beforeID, Limit: limit})
	if err != nil {
		e.t.Fatalf("ToggleHistory(%q): %v", kind, err)
	}
	return res.Changes
}

func fmtHistory(cs []twicetype.ToggleChange) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "  #%d %q %s -> %s by=%q reason=%q source=%q expires=%s at=%s\n",
			c.ID, c.Kind, c.Previous, c.New, c.By, c.Reason, c.Source, c.ExpiresAt, c.At)
	}
	if b.Len() == 0 {
		return "  (none)\n"
	}
	return b.String()
}

// checkHistory fails unless got holds want's changes in the same order,
// ignoring ids, which must only fall from one change to the next.
func checkHistory(t *testing.T, what string, got, want []twicetype.ToggleChange) {
	t.Helper()
	if !slices.EqualFunc(got, want, func(a, b twicetype.ToggleChange) bool {
		return a.Kind == b.Kind && a.By == b.By && a.Reason == b.Reason && a.Previous == b.Previous &&
			a.New == b.New && a.Source == b.Source && a.ExpiresAt.Equal(b.ExpiresAt) && a.At.Equal(b.At)
	}) {
		t.Fatalf("%s: ToggleHistory =\n%s\nwant\n%s", what, fmtHistory(got), fmtHistory(want))
	}
	for i, c := range got {
		if i > 0 && c.ID >= got[i-1].ID {
			t.Fatalf("%s: ToggleHistory ids do not fall, newest first:\n%s", what, fmtHistory(got))
		}
		if c.At.Location() != time.UTC || (!c.ExpiresAt.IsZero() && c.ExpiresAt.Location() != time.UTC) {
			t.Fatalf("%s: change #%d has times outside UTC: at %s, expires %s", what, c.ID, c.At, c.ExpiresAt)
		}
	}
}

func testToggleHistory(t *testing.T, e *env) {
	const kind = "storetest.history.v1"
	e.setToggle(e.s, twicetype.Toggle{Kind: "Storetest.History.V1", Enabled: false, Reason: "INC-7", By: "alice@laptop", At: e.base})
	if err := e.s.ToggleSet(e.ctx, &twicestore.ToggleSetParams{Source: "deploy-bot", Toggle: twicetype.Toggle{
		Kind: kind, Enabled: true, Reason: "fixed", By: "bob@ci", At: e.at(time.Minute), ExpiresAt: e.at(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	e.deleteToggleBy(e.s, &twicestore.ToggleDeleteParams{Kind: kind, By: "carol@host", Reason: "back to default",
		At: e.at(2 * time.Minute)})
	// A delete of no switch is still recorded: someone asked for it.
	e.deleteToggleBy(e.s, &twicestore.ToggleDeleteParams{Kind: kind, By: "dave@host", Reason: "again",
		Source: "dashboard", At: e.at(3 * time.Minute)})
	// Another kind's changes are not in this kind's history.
	other := twicetype.Toggle{Kind: "storetest.other.v1", Enabled: false, Reason: "other", By: "eve", At: e.at(4 * time.Minute)}
	e.setToggle(e.s, other)

	want := []twicetype.ToggleChange{
		{Kind: kind, By: "dave@host", Reason: "again", Previous: twicetype.ToggleNone, New: twicetype.ToggleNone,
			Source: "dashboard", At: e.at(3 * time.Minute)},
		{Kind: kind, By: "carol@host", Reason: "back to default", Previous: twicetype.ToggleOn, New: twicetype.ToggleNone,
			Source: twicetype.ToggleSourceStore, At: e.at(2 * time.Minute)},
		{Kind: kind, By: "bob@ci", Reason: "fixed", Previous: twicetype.ToggleOff, New: twicetype.ToggleOn,
			Source: "deploy-bot", ExpiresAt: e.at(time.Hour), At: e.at(time.Minute)},
		{Kind: kind, By: "alice@laptop", Reason: "INC-7", Previous: twicetype.ToggleNone, New: twicetype.ToggleOff,
			Source: twicetype.ToggleSourceStore, At: e.base},
	}
	checkHistory(t, "one kind", e.history(e.s, kind, 0, 0), want)
	checkHistory(t, "the kind in another case", e.history(e.s, "STORETEST.history.v1", 0, 0), want)
	all := append([]twicetype.ToggleChange{{Kind: other.Kind, By: "eve", Reason: "other",
		Previous: twicetype.ToggleNone, New: twicetype.ToggleOff, Source: twicetype.ToggleSourceStore, At: other.At}}, want...)
	checkHistory(t, "every kind", e.history(e.s, "", 0, 0), all)
	checkHistory(t, "a kind never changed", e.history(e.s, "storetest.never.v1", 0, 0), nil)
}

func testToggleHistoryExpired(t *testing.T, e *env) {
	const kind = "storetest.expiring.v1"
	e.setToggle(e.s, twicetype.Toggle{Kind: kind, Enabled: false, By: "a", At: e.base, ExpiresAt: e.at(time.Minute)})
	// Before the expiry the switch is off; at it, none.
	e.setToggle(e.s, twicetype.Toggle{Kind: kind, Enabled: false, By: "b", At: e.at(30 * time.Second), ExpiresAt: e.at(time.Minute)})
	e.setToggle(e.s, twicetype.Toggle{Kind: kind, Enabled: true, By: "c", At: e.at(time.Minute)})
	var got []string
	for _, c := range e.history(e.s, kind, 0, 0) {
		got = append(got, fmt.Sprintf("%s:%s->%s", c.By, c.Previous, c.New))
	}
	if want := []string{"c:none->on", "b:off->off", "a:none->off"}; !slices.Equal(got, want) {
		t.Fatalf("history = %q, want %q", got, want)
	}
}

func testToggleHistoryPages(t *testing.T, e *env) {
	const kind = "storetest.pages.v1"
	for i := range 5 {
		e.setToggle(e.s, twicetype.Toggle{Kind: kind, Enabled: i%2 == 0, By: fmt.Sprint("op", i), At: e.at(time.Duration(i) * time.Second)})
	}
	var (
		bys    []string
		before int64
	)
	for page := 0; ; page++ {
		cs := e.history(e.s, kind, before, 2)
		if len(cs) == 0 {
			break
		}
		if len(cs) > 2 || page > 3 {
			t.Fatalf("page %d holds %d changes with a limit of 2", page, len(cs))
		}
		for _, c := range cs {
			bys = append(bys, c.By)
		}
		before = cs[len(cs)-1].ID
	}
	if want := []string{"op4", "op3", "op2", "op1", "op0"}; !slices.Equal(bys, want) {
		t.Fatalf("paging by 2 listed %q, want %q", bys, want)
	}
}

func testToggleHistoryTx(t *testing.T, e *env) {
	const kind = "storetest.histtx.v1"
	tx := e.begin()
	e.setToggle(tx, twicetype.Toggle{Kind: kind, Enabled: false, By: "rolled", At: e.base})
	e.deleteToggleBy(tx, &twicestore.ToggleDeleteParams{Kind: kind, By: "rolled", At: e.base})
	if got := e.history(tx, kind, 0, 0); len(got) != 2 {
		t.Fatalf("inside the transaction the history holds\n%swant its 2 changes", fmtHistory(got))
	}
	if err := tx.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.history(e.s, kind, 0, 0); len(got) != 0 {
		t.Fatalf("after rollback the history holds\n%s", fmtHistory(got))
	}

	tx = e.begin()
	e.setToggle(tx, twicetype.Toggle{Kind: kind, Enabled: false, By: "committed", At: e.base})
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	checkHistory(t, "after commit", e.history(e.s, kind, 0, 0), []twicetype.ToggleChange{
		{Kind: kind, By: "committed", Previous: twicetype.ToggleNone, New: twicetype.ToggleOff,
			Source: twicetype.ToggleSourceStore, At: e.base},
	})
}

// testToggleHistoryConcurrent flips one switch from many goroutines: each
// change's previous state must be the state the change before it left,
// which holds only if the store serialises the changes of a kind (the
// first sets included, when no row exists yet to lock).
func testToggleHistoryConcurrent(t *testing.T, e *env) {
	const kind = "storetest.race.v1"
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			if i%3 == 2 {
				errs[i] = e.s.ToggleDelete(e.ctx, &twicestore.ToggleDeleteParams{Kind: kind, By: fmt.Sprint("op", i), At: e.base})
				return
			}
			errs[i] = e.s.ToggleSet(e.ctx, &twicestore.ToggleSetParams{Toggle: twicetype.Toggle{
				Kind: kind, Enabled: i%2 == 0, By: fmt.Sprint("op", i), At: e.base}})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
	}
	h := e.history(e.s, kind, 0, 0)
	if len(h) != n {
		t.Fatalf("history holds %d changes, want %d:\n%s", len(h), n, fmtHistory(h))
	}
	state := twicetype.ToggleNone
	for i := len(h) - 1; i >= 0; i-- { // oldest first
		if h[i].Previous != state {
			t.Fatalf("change #%d records previous state %s, but the change before left %s:\n%s",
				h[i].ID, h[i].Previous, state, fmtHistory(h))
		}
		state = h[i].New
	}
	got := e.toggles(e.s)
	switch {
	case state == twicetype.ToggleNone && len(got) != 0:
		t.Fatalf("the last change deleted the switch, yet ToggleList =\n%s", fmtToggles(got))
	case state != twicetype.ToggleNone && (len(got) != 1 || got[0].StateOf(e.base) != state):
		t.Fatalf("the stored switch is\n%swhile the last change left %s", fmtToggles(got), state)
	}
}

func testToggleHistoryEmpty(t *testing.T, e *env) {
	if got := e.history(e.s, "", 0, 0); len(got) != 0 {
		t.Fatalf("ToggleHistory on a new store =\n%s", fmtHistory(got))
	}
}
