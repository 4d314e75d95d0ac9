package storetest

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

var nodeTests = []test{
	{"HeartbeatListRemove", testNodes},
	{"Orphans", testOrphans},
}

func (e *env) heartbeat(n *twicetype.Node) {
	e.t.Helper()
	if err := e.s.NodeHeartbeat(e.ctx, &twicestore.NodeHeartbeatParams{Node: n}); err != nil {
		e.t.Fatalf("NodeHeartbeat(%s): %v", n.ID, err)
	}
}

func (e *env) nodes(aliveSince time.Time) []*twicetype.Node {
	e.t.Helper()
	ns, err := e.s.NodeList(e.ctx, &twicestore.NodeListParams{AliveSince: aliveSince})
	if err != nil {
		e.t.Fatalf("NodeList: %v", err)
	}
	return ns
}

func checkNode(t *testing.T, got, want *twicetype.Node) {
	t.Helper()
	if got.ID != want.ID || got.Host != want.Host || got.PID != want.PID ||
		!slices.Equal(got.Kinds, want.Kinds) || !slices.Equal(got.Queues, want.Queues) ||
		!got.StartedAt.Equal(want.StartedAt) || !got.HeartbeatAt.Equal(want.HeartbeatAt) {
		t.Errorf("node = %+v,\nwant %+v", got, want)
	}
}

func testNodes(t *testing.T, e *env) {
	live := &twicetype.Node{ID: "node-live", Host: "web-1", PID: 4242,
		Kinds: []string{"storetest.a.v1", "storetest.b.v1"}, Queues: []string{"default", "emails"},
		StartedAt: e.at(-time.Hour), HeartbeatAt: e.at(-10 * time.Second)}
	stale := &twicetype.Node{ID: "node-stale", Host: "web-2", PID: 7,
		Kinds: []string{"storetest.a.v1"}, Queues: []string{"default"},
		StartedAt: e.at(-2 * time.Hour), HeartbeatAt: e.at(-10 * time.Minute)}
	e.heartbeat(live)
	e.heartbeat(stale)

	alive := e.nodes(e.at(-time.Minute))
	if len(alive) != 1 {
		t.Fatalf("NodeList = %d nodes, want only the live one", len(alive))
	}
	checkNode(t, alive[0], live)
	if all := e.nodes(e.at(-time.Hour)); len(all) != 2 {
		t.Fatalf("NodeList since an hour ago = %d nodes, want 2", len(all))
	}

	// A later heartbeat replaces what the node reported.
	updated := *live
	updated.Kinds = []string{"storetest.c.v1"}
	updated.HeartbeatAt = e.base
	e.heartbeat(&updated)
	alive = e.nodes(e.at(-time.Minute))
	if len(alive) != 1 {
		t.Fatalf("after a second heartbeat NodeList = %d nodes, want 1", len(alive))
	}
	checkNode(t, alive[0], &updated)

	for _, id := range []string{"node-live", "node-unknown"} {
		if err := e.s.NodeRemove(e.ctx, &twicestore.NodeRemoveParams{ID: id}); err != nil {
			t.Fatalf("NodeRemove(%s): %v", id, err)
		}
	}
	if got := e.nodes(e.at(-time.Hour)); len(got) != 1 || got[0].ID != "node-stale" {
		t.Fatalf("after NodeRemove: %d nodes, want only node-stale", len(got))
	}
}

func testOrphans(t *testing.T, e *env) {
	const (
		unhandled = "storetest.unhandled.v1" // no node at all
		handled   = "storetest.handled.v1"   // a live node
		staleOnly = "storetest.staleonly.v1" // only a node that stopped beating
		notQueued = "storetest.running.v1"   // unhandled, but no available job
	)
	at := func(kind, queue string, created time.Duration) *twicestore.JobInsertParams {
		p := e.job(kind)
		p.Queue = queue
		p.CreatedAt = e.at(created)
		p.RunAt = e.at(created)
		return p
	}
	e.insert(
		at(unhandled, "default", -2*time.Minute),
		at(unhandled, "default", -time.Minute),
		at(unhandled, "emails", -30*time.Second),
		at(handled, "default", -time.Hour),
		at(staleOnly, "default", -5*time.Minute),
		at(notQueued, "default", -time.Hour),
	)
	e.fetchOne(e.base, notQueued)
	// A future RunAt is still queued work.
	future := at(unhandled, "default", -3*time.Minute)
	future.RunAt = e.at(time.Hour)
	e.insert(future)

	e.heartbeat(&twicetype.Node{ID: "live", Kinds: []string{handled, "storetest.other.v1"}, Queues: []string{"default"},
		StartedAt: e.at(-time.Hour), HeartbeatAt: e.base})
	e.heartbeat(&twicetype.Node{ID: "stale", Kinds: []string{staleOnly, handled}, Queues: []string{"default"},
		StartedAt: e.at(-time.Hour), HeartbeatAt: e.at(-10 * time.Minute)})

	res, err := e.s.JobOrphans(e.ctx, &twicestore.JobOrphansParams{AliveSince: e.at(-time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	want := []twicetype.OrphanKind{
		{Kind: staleOnly, Queue: "default", Count: 1, Oldest: e.at(-5 * time.Minute)},
		{Kind: unhandled, Queue: "default", Count: 3, Oldest: e.at(-3 * time.Minute)},
		{Kind: unhandled, Queue: "emails", Count: 1, Oldest: e.at(-30 * time.Second)},
	}
	got := slices.Clone(res.Kinds)
	slices.SortFunc(got, func(a, b twicetype.OrphanKind) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Queue, b.Queue))
	})
	if !slices.EqualFunc(got, want, func(a, b twicetype.OrphanKind) bool {
		return a.Kind == b.Kind && a.Queue == b.Queue && a.Count == b.Count && a.Oldest.Equal(b.Oldest)
	}) {
		t.Fatalf("JobOrphans =\n%s\nwant\n%s", fmtOrphans(got), fmtOrphans(want))
	}

	// With the stale node counted as alive, its kind is handled.
	res, err = e.s.JobOrphans(e.ctx, &twicestore.JobOrphansParams{AliveSince: e.at(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range res.Kinds {
		if o.Kind != unhandled {
			t.Errorf("with both nodes alive, %s is reported orphaned", o.Kind)
		}
	}
}

func fmtOrphans(os []twicetype.OrphanKind) string {
	s := ""
	for _, o := range os {
		s += fmt.Sprintf("  %s in %s: %d, oldest %s\n", o.Kind, o.Queue, o.Count, o.Oldest)
	}
	return s
}
