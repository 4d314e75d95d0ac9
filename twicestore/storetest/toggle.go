package storetest

import (
	"fmt"
	"slices"
	"strings"
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
			a.By == b.By && a.At.Equal(b.At)
	}) {
		t.Fatalf("%s: ToggleList =\n%s\nwant\n%s", what, fmtToggles(got), fmtToggles(want))
	}
}

func fmtToggles(ts []twicetype.Toggle) string {
	var b strings.Builder
	for _, tg := range ts {
		fmt.Fprintf(&b, "  %q enabled=%t reason=%q by=%q at=%s\n", tg.Kind, tg.Enabled, tg.Reason, tg.By, tg.At)
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
