package twice_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// TestCrashLoopingFleetReportsOrphans: a worker restarted every ~24 s
// never lives the 30 s its own start used to wait before its first
// orphan report. The fleet's view decides instead: the node its previous
// run left in the store (alive within the window, started a minute ago)
// shows the fleet has been up long enough, so the new node reports a kind
// no live node handles at its first heartbeat, not 30 s after its start.
func TestCrashLoopingFleetReportsOrphans(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	ctx := context.Background()
	now := time.Now()
	if err := store.NodeHeartbeat(ctx, &twicestore.NodeHeartbeatParams{Node: &twicetype.Node{
		ID: "worker-previous-run", Host: "h", PID: 1, Kinds: []string{(pingArgs{}).Kind()}, Queues: []string{"default"},
		StartedAt: now.Add(-time.Minute), HeartbeatAt: now.Add(-5 * time.Second),
	}}); err != nil {
		t.Fatal(err)
	}
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[pingArgs](func(context.Context, *twice.Job[pingArgs]) error { return nil }), nil)
	producer, err := twice.NewClient(store, twice.Config{Registry: reg, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := producer.Enqueue(ctx, creditArgs{CreditID: 1, Cents: 1}, nil); err != nil { // no node handles it
		t.Fatal(err)
	}

	var logs syncBuffer
	startLogged(t, store, testConfig(reg), &logs)
	// Far less than the 30 s the node's own start used to wait; the
	// report comes at its first heartbeat.
	waitfor.CondWithin(t, 15*time.Second, "the orphaned kind to be reported", func() bool {
		return strings.Contains(logs.String(), "no live worker handles")
	}, logs.String)
	if l := logs.String(); !strings.Contains(l, "kind=balance.credit.v1") {
		t.Errorf("the report does not name the kind:\n%s", l)
	}
}
