package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

var catalogTests = []test{
	{"PublishThenList", testCatalogPublish},
	{"LatestPublishWins", testCatalogLatestWins},
	{"LimitsRoundTrip", testCatalogLimits},
	{"HandlerNameRoundTrip", testCatalogHandlerName},
	{"SensitiveFlagOutlivesOlderPublish", testCatalogSensitiveKept},
	{"KeptAfterNodeStops", testCatalogKept},
	{"ListOrderedByKind", testCatalogOrder},
	{"InvalidParams", testCatalogInvalid},
	{"ZeroNowIsNow", testCatalogZeroNow},
	{"AtomicWithTx", testCatalogTx},
	{"EmptyList", testCatalogEmpty},
}

func (e *env) publish(ex twicestore.Executor, node string, now time.Time, kinds ...twicetype.KindInfo) {
	e.t.Helper()
	if err := ex.CatalogPublish(e.ctx, &twicestore.CatalogPublishParams{Node: node, Now: now, Kinds: kinds}); err != nil {
		e.t.Fatalf("CatalogPublish(%s): %v", node, err)
	}
}

func (e *env) catalog(ex twicestore.Executor) []twicetype.KindInfo {
	e.t.Helper()
	res, err := ex.CatalogList(e.ctx, &twicestore.CatalogListParams{})
	if err != nil {
		e.t.Fatalf("CatalogList: %v", err)
	}
	return res.Kinds
}

// published is k as the catalog lists it after node published it at now.
func published(k twicetype.KindInfo, node string, now time.Time) twicetype.KindInfo {
	k.Node, k.LastSeen = node, now
	return k
}

func sameKindInfo(a, b twicetype.KindInfo) bool {
	return a.Kind == b.Kind && a.HandlerName == b.HandlerName && a.Queue == b.Queue && a.Strategy == b.Strategy &&
		a.FailClosed == b.FailClosed && a.MaxAttempts == b.MaxAttempts && a.Timeout == b.Timeout &&
		slices.Equal(a.Args, b.Args) && slices.Equal(a.Schedules, b.Schedules) && a.Limit == b.Limit &&
		a.Node == b.Node && a.LastSeen.Equal(b.LastSeen) && a.LastSeen.Location() == time.UTC
}

// checkCatalog fails unless got and want hold the same kinds in the same
// order, LastSeen compared with Equal and required in UTC, and empty Args
// and Schedules equal to nil ones.
func checkCatalog(t *testing.T, what string, got, want []twicetype.KindInfo) {
	t.Helper()
	if !slices.EqualFunc(got, want, sameKindInfo) {
		t.Fatalf("%s: CatalogList =\n%s\nwant\n%s", what, fmtCatalog(got), fmtCatalog(want))
	}
}

func fmtCatalog(ks []twicetype.KindInfo) string {
	var b strings.Builder
	for _, k := range ks {
		fmt.Fprintf(&b, "  %q handler=%q queue=%q strategy=%q fail-closed=%t attempts=%d timeout=%s\n"+
			"    args=%+v schedules=%+v limit=%+v node=%q last-seen=%s\n",
			k.Kind, k.HandlerName, k.Queue, k.Strategy, k.FailClosed, k.MaxAttempts, k.Timeout, k.Args, k.Schedules, k.Limit, k.Node, k.LastSeen)
	}
	if b.Len() == 0 {
		return "  (none)\n"
	}
	return b.String()
}

// creditV1 is a kind with every field set.
func creditV1() twicetype.KindInfo {
	return twicetype.KindInfo{
		Kind: "storetest.credit.v1", HandlerName: "storetest.billing", Queue: "money", Strategy: "claim-before", FailClosed: true,
		MaxAttempts: 7, Timeout: 90 * time.Second,
		Args: []twicetype.ArgField{
			{Name: "account_id", Type: twicetype.ArgTypeString},
			{Name: "amount_cents", Type: twicetype.ArgTypeInteger},
			{Name: "card_number", Type: twicetype.ArgTypeString, Sensitive: true},
			{Name: "tags", Type: twicetype.ArgTypeArray},
		},
		Schedules: []twicetype.KindSchedule{{Name: "nightly-credit", Spec: "0 3 * * *"}, {Name: "hourly", Spec: "@every 1h"}},
		Limit:     twicetype.KindLimit{Global: 3},
	}
}

// testCatalogLimits: a kind's limits read back as published, every field
// and rate periods to the nanosecond, and a later publish replaces them,
// back to none included.
func testCatalogLimits(t *testing.T, e *env) {
	limited := creditV1()
	limited.Limit = everyLimit
	rated := twicetype.KindInfo{Kind: "storetest.rated.v1", Queue: "default",
		Limit: twicetype.KindLimit{Rate: twicetype.RateLimit{Limit: 1, Period: time.Millisecond}}}
	e.publish(e.s, "node-a", e.base, limited, rated)
	checkCatalog(t, "after the publish", e.catalog(e.s), []twicetype.KindInfo{
		published(limited, "node-a", e.base), published(rated, "node-a", e.base),
	})
	limited.Limit = twicetype.KindLimit{}
	e.publish(e.s, "node-b", e.at(time.Second), limited)
	checkCatalog(t, "after a publish without limits", e.catalog(e.s), []twicetype.KindInfo{
		published(limited, "node-b", e.at(time.Second)), published(rated, "node-a", e.base),
	})
}

// testCatalogHandlerName: a kind's handler name reads back as published,
// and a later publish replaces it, with none (an older node's, which
// reads as the kind) included.
func testCatalogHandlerName(t *testing.T, e *env) {
	named := twicetype.KindInfo{Kind: "storetest.charge.v1", HandlerName: "storetest.billing", Queue: "default"}
	e.publish(e.s, "node-a", e.base, named)
	got := e.catalog(e.s)
	checkCatalog(t, "after the publish", got, []twicetype.KindInfo{published(named, "node-a", e.base)})
	if h := got[0].Handler(); h != "storetest.billing" {
		t.Fatalf("Handler() = %q, want the published handler name", h)
	}
	unnamed := named
	unnamed.HandlerName = ""
	e.publish(e.s, "node-old", e.at(time.Second), unnamed)
	got = e.catalog(e.s)
	checkCatalog(t, "after a publish without one", got, []twicetype.KindInfo{published(unnamed, "node-old", e.at(time.Second))})
	if h := got[0].Handler(); h != named.Kind {
		t.Fatalf("Handler() of an entry without a handler name = %q, want the kind", h)
	}
}

func testCatalogPublish(t *testing.T, e *env) {
	credit := creditV1()
	// A kind with nothing but its name and queue: no args, no schedules.
	bare := twicetype.KindInfo{Kind: "storetest.bare.v1", Queue: "default"}
	// Node and LastSeen come from the publish, not from the kinds.
	stray := credit
	stray.Node, stray.LastSeen = "someone-else", e.at(-time.Hour)
	e.publish(e.s, "node-a", e.base, stray, bare)
	checkCatalog(t, "after one publish", e.catalog(e.s), []twicetype.KindInfo{
		published(bare, "node-a", e.base), published(credit, "node-a", e.base),
	})
	// A heartbeat later, the same node publishes the same kinds again.
	e.publish(e.s, "node-a", e.at(10*time.Second), credit, bare)
	checkCatalog(t, "after the next heartbeat", e.catalog(e.s), []twicetype.KindInfo{
		published(bare, "node-a", e.at(10*time.Second)), published(credit, "node-a", e.at(10*time.Second)),
	})
	// A publish of no kinds changes nothing.
	e.publish(e.s, "node-a", e.at(20*time.Second))
	if got := e.catalog(e.s); len(got) != 2 || !got[0].LastSeen.Equal(e.at(10*time.Second)) {
		t.Fatalf("a publish of no kinds changed the catalog:\n%s", fmtCatalog(got))
	}
}

// testCatalogLatestWins rolls a kind from v1's args to v2's: while old and
// new nodes both run, each publish replaces the kind's shape, and once only
// new nodes publish, the new shape stands.
func testCatalogLatestWins(t *testing.T, e *env) {
	v1 := creditV1()
	v2 := creditV1()
	v2.Queue, v2.FailClosed, v2.MaxAttempts, v2.Timeout = "money-v2", false, 3, 0
	v2.Args = []twicetype.ArgField{
		{Name: "account_id", Type: twicetype.ArgTypeString},
		{Name: "amount", Type: twicetype.ArgTypeNumber},
		{Name: "currency", Type: twicetype.ArgTypeString},
	}
	v2.Schedules = nil
	v2.HandlerName = "storetest.credit.v2"

	e.publish(e.s, "node-old", e.base, v1)
	e.publish(e.s, "node-new", e.at(time.Second), v2)
	checkCatalog(t, "after the new node published", e.catalog(e.s),
		[]twicetype.KindInfo{published(v2, "node-new", e.at(time.Second))})
	e.publish(e.s, "node-old", e.at(2*time.Second), v1)
	checkCatalog(t, "after the old node published again", e.catalog(e.s),
		[]twicetype.KindInfo{published(v1, "node-old", e.at(2*time.Second))})
	e.publish(e.s, "node-new", e.at(3*time.Second), v2)
	checkCatalog(t, "after the old node stopped and the new one published", e.catalog(e.s),
		[]twicetype.KindInfo{published(v2, "node-new", e.at(3*time.Second))})
}

// testCatalogSensitiveKept rolls out a deploy that tags a field sensitive
// and drops another: an old node's later publish, without the tags, must
// not un-redact either while the newer publish that set them is recent
// (at or after KeepSensitiveSince); once it is not, the last publish's
// flags stand again.
func testCatalogSensitiveKept(t *testing.T, e *env) {
	old := creditV1()
	old.Args = []twicetype.ArgField{
		{Name: "account_id", Type: twicetype.ArgTypeString},
		{Name: "iban", Type: twicetype.ArgTypeString},
	}
	fresh := creditV1()
	fresh.Args = []twicetype.ArgField{
		{Name: "account_id", Type: twicetype.ArgTypeString},
		{Name: "iban", Type: twicetype.ArgTypeString, Sensitive: true},
		{Name: "cvc", Type: twicetype.ArgTypeString, Sensitive: true},
	}
	publish := func(node string, at time.Time, keepSince time.Time, k twicetype.KindInfo) {
		t.Helper()
		if err := e.s.CatalogPublish(e.ctx, &twicestore.CatalogPublishParams{Node: node, Now: at,
			KeepSensitiveSince: keepSince, Kinds: []twicetype.KindInfo{k}}); err != nil {
			t.Fatalf("CatalogPublish(%s): %v", node, err)
		}
	}
	const window = 30 * time.Second
	publish("node-new", e.base, e.base.Add(-window), fresh)
	// The old node publishes after the new one, within the window: the
	// fields the new one marked stay marked, cvc (unknown to the old
	// node, but on the jobs the new producers enqueue) included.
	publish("node-old", e.at(time.Second), e.at(time.Second-window), old)
	wantKept := old
	wantKept.Args = []twicetype.ArgField{
		{Name: "account_id", Type: twicetype.ArgTypeString},
		{Name: "iban", Type: twicetype.ArgTypeString, Sensitive: true},
		{Name: "cvc", Type: twicetype.ArgTypeString, Sensitive: true},
	}
	checkCatalog(t, "after the old node published over the new one", e.catalog(e.s),
		[]twicetype.KindInfo{published(wantKept, "node-old", e.at(time.Second))})
	// Again and again: a kept flag keeps the time of the publish that set
	// it, so the old node's own publishes do not renew it.
	publish("node-old", e.at(20*time.Second), e.at(20*time.Second-window), old)
	checkCatalog(t, "after the old node published again", e.catalog(e.s),
		[]twicetype.KindInfo{published(wantKept, "node-old", e.at(20*time.Second))})
	// The new node stopped publishing longer ago than the window: the old
	// node's shape stands.
	publish("node-old", e.at(time.Minute), e.at(time.Minute-window), old)
	checkCatalog(t, "after the new node's publish grew old", e.catalog(e.s),
		[]twicetype.KindInfo{published(old, "node-old", e.at(time.Minute))})
	// A publish with no KeepSensitiveSince keeps nothing.
	publish("node-new", e.at(2*time.Minute), time.Time{}, fresh)
	publish("node-old", e.at(2*time.Minute+time.Second), time.Time{}, old)
	checkCatalog(t, "after a publish that keeps no flag", e.catalog(e.s),
		[]twicetype.KindInfo{published(old, "node-old", e.at(2*time.Minute+time.Second))})
}

func testCatalogKept(t *testing.T, e *env) {
	e.heartbeat(&twicetype.Node{ID: "node-gone", Kinds: []string{"storetest.credit.v1"}, Queues: []string{"money"},
		StartedAt: e.at(-time.Hour), HeartbeatAt: e.base})
	e.publish(e.s, "node-gone", e.base, creditV1())
	if err := e.s.NodeRemove(e.ctx, &twicestore.NodeRemoveParams{ID: "node-gone"}); err != nil {
		t.Fatal(err)
	}
	checkCatalog(t, "after its node was removed", e.catalog(e.s),
		[]twicetype.KindInfo{published(creditV1(), "node-gone", e.base)})
}

func testCatalogOrder(t *testing.T, e *env) {
	// Ordered by the kind's bytes, whatever the database's collation (see
	// testToggleOrder).
	kinds := []string{"storetest.z.v1", "storetest.ab.v1", "storetest.a-c.v1", "storetest.B.v1", "storetest.a.v1"}
	var in, want []twicetype.KindInfo
	for _, k := range kinds {
		ki := twicetype.KindInfo{Kind: k, Queue: "default"}
		in = append(in, ki)
		want = append(want, published(ki, "node-a", e.base))
	}
	e.publish(e.s, "node-a", e.base, in...)
	slices.SortFunc(want, func(a, b twicetype.KindInfo) int { return strings.Compare(a.Kind, b.Kind) })
	checkCatalog(t, "ordering", e.catalog(e.s), want)
}

func testCatalogInvalid(t *testing.T, e *env) {
	for _, tc := range []struct {
		name string
		p    twicestore.CatalogPublishParams
	}{
		{"no node", twicestore.CatalogPublishParams{Kinds: []twicetype.KindInfo{creditV1()}}},
		{"a kind with no name", twicestore.CatalogPublishParams{Node: "node-a",
			Kinds: []twicetype.KindInfo{creditV1(), {Queue: "default"}}}},
		{"a kind twice", twicestore.CatalogPublishParams{Node: "node-a",
			Kinds: []twicetype.KindInfo{creditV1(), creditV1()}}},
	} {
		err := e.s.CatalogPublish(e.ctx, &tc.p)
		if err == nil {
			t.Errorf("%s: CatalogPublish accepted it", tc.name)
		}
		if errors.Is(err, twicestore.ErrNotFound) {
			t.Errorf("%s: CatalogPublish = %v, want a validation error", tc.name, err)
		}
	}
	checkCatalog(t, "after the refused publishes", e.catalog(e.s), nil)
}

func testCatalogZeroNow(t *testing.T, e *env) {
	before := time.Now().Add(-time.Second)
	e.publish(e.s, "node-a", time.Time{}, twicetype.KindInfo{Kind: "storetest.now.v1", Queue: "default"})
	after := time.Now().Add(time.Second)
	got := e.catalog(e.s)
	if len(got) != 1 || got[0].LastSeen.Before(before) || got[0].LastSeen.After(after) {
		t.Fatalf("a publish with a zero Now lists\n%swant LastSeen the time of the publish (%s to %s)",
			fmtCatalog(got), before, after)
	}
}

func testCatalogTx(t *testing.T, e *env) {
	tx := e.begin()
	e.publish(tx, "node-a", e.base, creditV1())
	checkCatalog(t, "inside the transaction", e.catalog(tx), []twicetype.KindInfo{published(creditV1(), "node-a", e.base)})
	if err := tx.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	checkCatalog(t, "after rollback", e.catalog(e.s), nil)
}

func testCatalogEmpty(t *testing.T, e *env) {
	if got := e.catalog(e.s); got == nil || len(got) != 0 {
		t.Fatalf("CatalogList on a new store = %#v, want an empty, non-nil list", got)
	}
}
