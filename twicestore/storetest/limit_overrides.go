package storetest

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// limitOverrideTests check the runtime overrides of kinds' limits and
// queues' concurrency, and their history (LimitOverrider).
var limitOverrideTests = []test{
	{"SetThenList", testLimitOverrideSetList},
	{"SetReplacesAndReturnsPrevious", testLimitOverrideReplace},
	{"ClearRemoves", testLimitOverrideClear},
	{"ZeroAtIsNow", testLimitOverrideZeroAt},
	{"InvalidParams", testLimitOverrideInvalid},
	{"HistoryRecordsEveryChange", testLimitHistory},
	{"HistoryPages", testLimitHistoryPages},
	{"AtomicWithTx", testLimitOverrideTx},
	{"HistoryConcurrentSets", testLimitHistoryConcurrent},
}

func kindOverride(kind string, l twicetype.KindLimit, by string, at time.Time) twicetype.LimitOverride {
	return twicetype.LimitOverride{Scope: twicetype.LimitScopeKind, Name: kind, LimitSetting: twicetype.LimitSetting{Limit: l},
		By: by, Reason: "because " + by, At: at}
}

func queueOverride(queue string, n int, by string, at time.Time) twicetype.LimitOverride {
	return twicetype.LimitOverride{Scope: twicetype.LimitScopeQueue, Name: queue, LimitSetting: twicetype.LimitSetting{Concurrency: n},
		By: by, Reason: "because " + by, At: at}
}

func (e *env) setOverride(ex twicestore.Executor, o twicetype.LimitOverride) *twicetype.LimitOverride {
	e.t.Helper()
	res, err := ex.LimitOverrideSet(e.ctx, &twicestore.LimitOverrideSetParams{Override: o})
	if err != nil {
		e.t.Fatalf("LimitOverrideSet(%s %s): %v", o.Scope, o.Name, err)
	}
	return res.Previous
}

func (e *env) clearOverride(ex twicestore.Executor, scope twicetype.LimitScope, name, by string, at time.Time) *twicetype.LimitOverride {
	e.t.Helper()
	res, err := ex.LimitOverrideClear(e.ctx, &twicestore.LimitOverrideClearParams{Scope: scope, Name: name, By: by, Reason: "because " + by, At: at})
	if err != nil {
		e.t.Fatalf("LimitOverrideClear(%s %s): %v", scope, name, err)
	}
	return res.Previous
}

func (e *env) overrides(ex twicestore.Executor) []twicetype.LimitOverride {
	e.t.Helper()
	res, err := ex.LimitOverrideList(e.ctx, &twicestore.LimitOverrideListParams{})
	if err != nil {
		e.t.Fatalf("LimitOverrideList: %v", err)
	}
	return res.Overrides
}

func (e *env) limitHistory(ex twicestore.Executor, p twicestore.LimitHistoryParams) []twicetype.LimitChange {
	e.t.Helper()
	res, err := ex.LimitHistory(e.ctx, &p)
	if err != nil {
		e.t.Fatalf("LimitHistory: %v", err)
	}
	return res.Changes
}

// sameOverride compares with times Equal and required in UTC.
func sameOverride(a, b twicetype.LimitOverride) bool {
	return a.Scope == b.Scope && a.Name == b.Name && a.LimitSetting == b.LimitSetting &&
		a.By == b.By && a.Reason == b.Reason && a.At.Equal(b.At) && a.At.Location() == time.UTC
}

func checkOverrides(t *testing.T, what string, got, want []twicetype.LimitOverride) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		ok = sameOverride(got[i], want[i])
	}
	if !ok {
		t.Fatalf("%s: LimitOverrideList =\n%s\nwant\n%s", what, fmtOverrides(got), fmtOverrides(want))
	}
}

func fmtOverrides(os []twicetype.LimitOverride) string {
	var b strings.Builder
	for _, o := range os {
		fmt.Fprintf(&b, "  %s %q %+v by=%q reason=%q at=%s\n", o.Scope, o.Name, o.LimitSetting, o.By, o.Reason, o.At)
	}
	if b.Len() == 0 {
		return "  (none)\n"
	}
	return b.String()
}

func fmtLimitHistory(cs []twicetype.LimitChange) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "  #%d %s %q %v -> %v by=%q reason=%q at=%s\n", c.ID, c.Scope, c.Name, c.Previous, c.New, c.By, c.Reason, c.At)
	}
	if b.Len() == 0 {
		return "  (none)\n"
	}
	return b.String()
}

// everyLimit sets every field of a KindLimit, with periods that are not
// whole microseconds: the store keeps them exactly.
var everyLimit = twicetype.KindLimit{Global: 7, PerKey: 2, KeyOrderSkipsRetries: true,
	Rate:    twicetype.RateLimit{Limit: 100, Period: 1500*time.Microsecond + 7},
	KeyRate: twicetype.RateLimit{Limit: 5, Period: time.Hour}}

// testLimitOverrideSetList: both scopes round-trip every field and list by
// scope (kinds first), then by name's bytes; a kind and a queue of the
// same name are two overrides.
func testLimitOverrideSetList(t *testing.T, e *env) {
	if got := e.overrides(e.s); len(got) != 0 {
		t.Fatalf("a new store lists overrides:\n%s", fmtOverrides(got))
	}
	q := queueOverride("bulk", 3, "ops", e.at(time.Second))
	qSame := queueOverride("storetest.b.v1", 1, "ops", e.at(time.Second))
	b := kindOverride("storetest.b.v1", everyLimit, "alice", e.base)
	a := kindOverride("storetest.a-c.v1", twicetype.KindLimit{Global: 1}, "bob", e.at(2*time.Second))
	none := kindOverride("storetest.a.v1", twicetype.KindLimit{}, "carol", e.base) // an override to "no limit"
	for _, o := range []twicetype.LimitOverride{q, qSame, b, a, none} {
		if prev := e.setOverride(e.s, o); prev != nil {
			t.Fatalf("a first set of %s %s returned a previous override %+v", o.Scope, o.Name, prev)
		}
	}
	checkOverrides(t, "after five sets", e.overrides(e.s), []twicetype.LimitOverride{a, none, b, q, qSame})
}

func testLimitOverrideReplace(t *testing.T, e *env) {
	first := kindOverride("storetest.r.v1", twicetype.KindLimit{Global: 1}, "alice", e.base)
	e.setOverride(e.s, first)
	second := kindOverride("storetest.r.v1", twicetype.KindLimit{Rate: twicetype.RateLimit{Limit: 3, Period: time.Minute}}, "bob", e.at(time.Minute))
	prev := e.setOverride(e.s, second)
	if prev == nil || !sameOverride(*prev, first) {
		t.Fatalf("the second set returned previous %+v, want the first %+v", prev, first)
	}
	checkOverrides(t, "after the second set", e.overrides(e.s), []twicetype.LimitOverride{second})
}

func testLimitOverrideClear(t *testing.T, e *env) {
	kept := queueOverride("default", 4, "alice", e.base)
	gone := kindOverride("default", twicetype.KindLimit{Global: 2}, "alice", e.base)
	e.setOverride(e.s, kept)
	e.setOverride(e.s, gone)
	if prev := e.clearOverride(e.s, twicetype.LimitScopeKind, "default", "bob", e.at(time.Second)); prev == nil || !sameOverride(*prev, gone) {
		t.Fatalf("clear returned %+v, want the override removed %+v", prev, gone)
	}
	checkOverrides(t, "after the clear", e.overrides(e.s), []twicetype.LimitOverride{kept})
	if prev := e.clearOverride(e.s, twicetype.LimitScopeKind, "default", "carol", e.at(2*time.Second)); prev != nil {
		t.Fatalf("a clear of no override returned %+v", prev)
	}
	if h := e.limitHistory(e.s, twicestore.LimitHistoryParams{}); len(h) != 3 {
		t.Fatalf("history after two sets, a clear and a clear of nothing:\n%swant 3 changes: a clear of nothing records none", fmtLimitHistory(h))
	}
}

func testLimitOverrideZeroAt(t *testing.T, e *env) {
	before := time.Now().Add(-time.Second)
	e.setOverride(e.s, queueOverride("default", 2, "ops", time.Time{}))
	e.clearOverride(e.s, twicetype.LimitScopeQueue, "default", "ops", time.Time{})
	e.setOverride(e.s, queueOverride("default", 3, "ops", time.Time{}))
	after := time.Now().Add(time.Second)
	got := e.overrides(e.s)
	if len(got) != 1 || got[0].At.Before(before) || got[0].At.After(after) {
		t.Fatalf("a zero At stored\n%swant the time of the set", fmtOverrides(got))
	}
	for _, c := range e.limitHistory(e.s, twicestore.LimitHistoryParams{}) {
		if c.At.Before(before) || c.At.After(after) {
			t.Fatalf("a zero At recorded change at %s, want the time of the change", c.At)
		}
	}
}

func testLimitOverrideInvalid(t *testing.T, e *env) {
	for _, o := range []twicetype.LimitOverride{
		{Scope: "tenant", Name: "x", LimitSetting: twicetype.LimitSetting{Concurrency: 1}},
		{Scope: twicetype.LimitScopeKind, LimitSetting: twicetype.LimitSetting{Limit: twicetype.KindLimit{Global: 1}}},
		{Scope: twicetype.LimitScopeKind, Name: "k", LimitSetting: twicetype.LimitSetting{Limit: twicetype.KindLimit{Global: -1}}},
		{Scope: twicetype.LimitScopeKind, Name: "k", LimitSetting: twicetype.LimitSetting{Limit: twicetype.KindLimit{Rate: twicetype.RateLimit{Limit: 1}}}},
		{Scope: twicetype.LimitScopeKind, Name: "k", LimitSetting: twicetype.LimitSetting{Concurrency: 2}},
		{Scope: twicetype.LimitScopeQueue, Name: "q"},
		{Scope: twicetype.LimitScopeQueue, Name: "q", LimitSetting: twicetype.LimitSetting{Concurrency: -3}},
		{Scope: twicetype.LimitScopeQueue, Name: "q", LimitSetting: twicetype.LimitSetting{Concurrency: 1, Limit: twicetype.KindLimit{Global: 1}}},
	} {
		if _, err := e.s.LimitOverrideSet(e.ctx, &twicestore.LimitOverrideSetParams{Override: o}); err == nil {
			t.Errorf("LimitOverrideSet(%+v) succeeded", o)
		}
	}
	if _, err := e.s.LimitOverrideClear(e.ctx, &twicestore.LimitOverrideClearParams{Scope: twicetype.LimitScopeQueue}); err == nil {
		t.Error("LimitOverrideClear with no name succeeded")
	}
	if got := e.overrides(e.s); len(got) != 0 {
		t.Fatalf("refused sets stored\n%s", fmtOverrides(got))
	}
	if h := e.limitHistory(e.s, twicestore.LimitHistoryParams{}); len(h) != 0 {
		t.Fatalf("refused sets recorded\n%s", fmtLimitHistory(h))
	}
}

// testLimitHistory: every set and clear is a row, newest first, with the
// override before and after, who, why and when; a scope and name select
// one override's rows.
func testLimitHistory(t *testing.T, e *env) {
	const kind = "storetest.h.v1"
	one := twicetype.KindLimit{Global: 1}
	e.setOverride(e.s, kindOverride(kind, one, "alice", e.base))
	e.setOverride(e.s, queueOverride(kind, 5, "bob", e.at(time.Second))) // a queue of the kind's name
	e.setOverride(e.s, kindOverride(kind, everyLimit, "carol", e.at(2*time.Second)))
	e.clearOverride(e.s, twicetype.LimitScopeKind, kind, "dave", e.at(3*time.Second))

	setting := func(s twicetype.LimitSetting) *twicetype.LimitSetting { return &s }
	want := []twicetype.LimitChange{
		{Scope: twicetype.LimitScopeKind, Name: kind, Previous: setting(twicetype.LimitSetting{Limit: everyLimit}), By: "dave", Reason: "because dave", At: e.at(3 * time.Second)},
		{Scope: twicetype.LimitScopeKind, Name: kind, Previous: setting(twicetype.LimitSetting{Limit: one}), New: setting(twicetype.LimitSetting{Limit: everyLimit}), By: "carol", Reason: "because carol", At: e.at(2 * time.Second)},
		{Scope: twicetype.LimitScopeQueue, Name: kind, New: setting(twicetype.LimitSetting{Concurrency: 5}), By: "bob", Reason: "because bob", At: e.at(time.Second)},
		{Scope: twicetype.LimitScopeKind, Name: kind, New: setting(twicetype.LimitSetting{Limit: one}), By: "alice", Reason: "because alice", At: e.base},
	}
	checkLimitHistory(t, "every change", e.limitHistory(e.s, twicestore.LimitHistoryParams{}), want)
	checkLimitHistory(t, "the kind's", e.limitHistory(e.s, twicestore.LimitHistoryParams{Scope: twicetype.LimitScopeKind, Name: kind}),
		[]twicetype.LimitChange{want[0], want[1], want[3]})
	checkLimitHistory(t, "the queue's", e.limitHistory(e.s, twicestore.LimitHistoryParams{Scope: twicetype.LimitScopeQueue, Name: kind}),
		[]twicetype.LimitChange{want[2]})
}

func checkLimitHistory(t *testing.T, what string, got, want []twicetype.LimitChange) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		g, w := got[i], want[i]
		ok = g.ID > 0 && (i == 0 || g.ID < got[i-1].ID) && g.Scope == w.Scope && g.Name == w.Name &&
			reflect.DeepEqual(g.Previous, w.Previous) && reflect.DeepEqual(g.New, w.New) &&
			g.By == w.By && g.Reason == w.Reason && g.At.Equal(w.At) && g.At.Location() == time.UTC
	}
	if !ok {
		t.Fatalf("%s: LimitHistory =\n%swant (ids descending)\n%s", what, fmtLimitHistory(got), fmtLimitHistory(want))
	}
}

func testLimitHistoryPages(t *testing.T, e *env) {
	for i := range 5 {
		e.setOverride(e.s, queueOverride("default", i+1, fmt.Sprint("op", i), e.at(time.Duration(i)*time.Second)))
	}
	all := e.limitHistory(e.s, twicestore.LimitHistoryParams{})
	var paged []twicetype.LimitChange
	var before int64
	for {
		page := e.limitHistory(e.s, twicestore.LimitHistoryParams{BeforeID: before, Limit: 2})
		if len(page) == 0 {
			break
		}
		if len(page) > 2 {
			t.Fatalf("a page of Limit 2 holds %d changes", len(page))
		}
		paged = append(paged, page...)
		before = page[len(page)-1].ID
	}
	if !reflect.DeepEqual(paged, all) {
		t.Fatalf("paged history\n%sdiffers from the whole\n%s", fmtLimitHistory(paged), fmtLimitHistory(all))
	}
	if len(all) != 5 || all[0].By != "op4" {
		t.Fatalf("history\n%swant 5 changes, op4's first", fmtLimitHistory(all))
	}
}

// testLimitOverrideTx: a set and its history row commit with the caller's
// transaction or not at all.
func testLimitOverrideTx(t *testing.T, e *env) {
	tx := e.begin()
	rolled := queueOverride("default", 2, "rolled", e.base)
	e.setOverride(tx, rolled)
	checkOverrides(t, "inside the transaction", e.overrides(tx), []twicetype.LimitOverride{rolled})
	if err := tx.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	checkOverrides(t, "after rollback", e.overrides(e.s), nil)
	if h := e.limitHistory(e.s, twicestore.LimitHistoryParams{}); len(h) != 0 {
		t.Fatalf("after rollback the history holds\n%s", fmtLimitHistory(h))
	}

	tx = e.begin()
	committed := queueOverride("default", 3, "committed", e.base)
	e.setOverride(tx, committed)
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	checkOverrides(t, "after commit", e.overrides(e.s), []twicetype.LimitOverride{committed})
	if h := e.limitHistory(e.s, twicestore.LimitHistoryParams{}); len(h) != 1 || h[0].By != "committed" {
		t.Fatalf("after commit the history holds\n%swant the committed set", fmtLimitHistory(h))
	}
}

// testLimitHistoryConcurrent changes one override from many goroutines:
// each change's previous override must be what the change before it left,
// which holds only if the store serialises the changes of an override
// (the first sets included, when no row exists yet to lock).
func testLimitHistoryConcurrent(t *testing.T, e *env) {
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			if i%3 == 2 {
				_, errs[i] = e.s.LimitOverrideClear(e.ctx, &twicestore.LimitOverrideClearParams{
					Scope: twicetype.LimitScopeQueue, Name: "default", By: fmt.Sprint("op", i), At: e.base})
				return
			}
			_, errs[i] = e.s.LimitOverrideSet(e.ctx, &twicestore.LimitOverrideSetParams{
				Override: queueOverride("default", i+1, fmt.Sprint("op", i), e.base)})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
	}
	h := e.limitHistory(e.s, twicestore.LimitHistoryParams{})
	var state *twicetype.LimitSetting
	for i := len(h) - 1; i >= 0; i-- { // oldest first
		if !reflect.DeepEqual(h[i].Previous, state) {
			t.Fatalf("change #%d records previous %v, but the change before left %v:\n%s", h[i].ID, h[i].Previous, state, fmtLimitHistory(h))
		}
		state = h[i].New
	}
	got := e.overrides(e.s)
	switch {
	case state == nil && len(got) != 0:
		t.Fatalf("the last change cleared the override, yet LimitOverrideList =\n%s", fmtOverrides(got))
	case state != nil && (len(got) != 1 || got[0].LimitSetting != *state):
		t.Fatalf("the stored override is\n%swhile the last change left %v", fmtOverrides(got), state)
	}
}

// testLimitHistoryPrune: history rows changed before Before go, oldest
// first and Limit at a time, except the newest of each override, which
// says who set it as it stands.
func testLimitHistoryPrune(t *testing.T, e *env) {
	set := func(scope twicetype.LimitScope, name string, n int, at time.Duration) {
		o := queueOverride(name, n, "ops", e.at(at))
		if scope == twicetype.LimitScopeKind {
			o = kindOverride(name, twicetype.KindLimit{Global: n}, "ops", e.at(at))
		}
		e.setOverride(e.s, o)
	}
	set(twicetype.LimitScopeKind, "storetest.a.v1", 1, -3*time.Hour)
	set(twicetype.LimitScopeKind, "storetest.a.v1", 2, -2*time.Hour)
	set(twicetype.LimitScopeKind, "storetest.a.v1", 3, -time.Hour)
	set(twicetype.LimitScopeQueue, "storetest.a.v1", 1, -3*time.Hour) // old, but the queue's newest
	set(twicetype.LimitScopeQueue, "bulk", 1, -4*time.Hour)
	set(twicetype.LimitScopeQueue, "bulk", 2, 0) // recent
	prune := func(before time.Time, limit int) int {
		t.Helper()
		res, err := e.s.LimitHistoryPrune(e.ctx, &twicestore.LimitHistoryPruneParams{Before: before, Limit: limit})
		if err != nil {
			t.Fatalf("LimitHistoryPrune: %v", err)
		}
		return res.Deleted
	}
	if n := prune(time.Time{}, 0); n != 0 {
		t.Fatalf("a zero Before deleted %d rows", n)
	}
	if n := prune(e.at(-30*time.Minute), 1); n != 1 {
		t.Fatalf("Limit 1 deleted %d rows", n)
	}
	if n := prune(e.at(-30*time.Minute), 0); n != 2 {
		t.Fatalf("the rest deleted %d rows, want the kind's -2h and bulk's -4h", n)
	}
	got := e.limitHistory(e.s, twicestore.LimitHistoryParams{})
	type key struct {
		scope twicetype.LimitScope
		name  string
	}
	want := []key{{twicetype.LimitScopeQueue, "bulk"}, {twicetype.LimitScopeQueue, "storetest.a.v1"}, {twicetype.LimitScopeKind, "storetest.a.v1"}}
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		ok = key{got[i].Scope, got[i].Name} == want[i]
	}
	if !ok {
		t.Fatalf("history left:\n%swant each override's newest change", fmtLimitHistory(got))
	}
}
