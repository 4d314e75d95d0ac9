package twice_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// TestCatalogPublishedAtStart: a started worker has published its kinds,
// with their options resolved, args fields, sensitive flags and schedules,
// before Start returns, and they stay after it stops; a client without
// those kinds (the stock CLI, the dashboard) reads them from the catalog,
// live while the node's last report is recent.
func TestCatalogPublishedAtStart(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		cfg := testConfig(adminRegistry(t))
		cfg.NodeID = "worker-1"
		cfg.Queues = []twice.QueueConfig{{Name: twice.QueueDefault}, {Name: "reports"}}
		worker := startClient(t, store, cfg)
		// The catalog outlives its node: read it after the worker stopped.
		if err := worker.Stop(ctx); err != nil {
			t.Fatal(err)
		}

		res, err := store.CatalogList(ctx, &twicestore.CatalogListParams{})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Kinds) != 2 {
			t.Fatalf("catalog has %d kinds, want 2: %+v", len(res.Kinds), res.Kinds)
		}
		charge, report := res.Kinds[0], res.Kinds[1]
		if charge.Kind != "billing.charge.v1" || charge.Queue != twice.QueueDefault || charge.Strategy != "claim-before" ||
			!charge.FailClosed || charge.MaxAttempts != twice.MaxAttemptsDefault || charge.Timeout != time.Minute ||
			charge.Node != "worker-1" || charge.LastSeen.IsZero() {
			t.Errorf("charge kind: %+v", charge)
		}
		wantFields := []twicetype.ArgField{
			{Name: "charge_id", Type: twicetype.ArgTypeInteger},
			{Name: "card_token", Type: twicetype.ArgTypeString, Sensitive: true},
			{Name: "lines", Type: twicetype.ArgTypeArray},
		}
		if len(charge.Args) != len(wantFields) || charge.Args[0] != wantFields[0] || charge.Args[1] != wantFields[1] || charge.Args[2] != wantFields[2] {
			t.Errorf("charge args %+v, want %+v", charge.Args, wantFields)
		}
		if report.Kind != "report.monthly.v1" || report.Queue != "reports" || report.Strategy != "claim-after" || report.FailClosed ||
			report.MaxAttempts != 3 || len(report.Schedules) != 1 || report.Schedules[0] != (twicetype.KindSchedule{Name: "monthly-report", Spec: "0 3 1 * *"}) {
			t.Errorf("report kind: %+v", report)
		}

		// The stock tool's view: catalogued, live, not registered here.
		bare := adminClient(t, store, nil)
		cat, err := bare.Catalog(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(cat) != 2 || !cat[0].Live || cat[0].Registered || cat[0].Kind != "billing.charge.v1" {
			t.Fatalf("bare client's catalog %+v", cat)
		}
		fields := cat[0].Args // what CheckArgsJSON takes
		if err := twice.CheckArgsJSON(cat[0].Kind, []byte(`{"charge_id": 1, "card_token": "tok"}`), fields, 0); err != nil {
			t.Errorf("catalogued fields refuse good args: %v", err)
		}
		if err := twice.CheckArgsJSON(cat[0].Kind, []byte(`{"charge_id": "one"}`), fields, 0); err == nil {
			t.Error("catalogued fields take a string for an integer")
		}
		if err := twice.CheckArgsJSON(cat[0].Kind, []byte(`{"lines": 3}`), fields, 0); err == nil {
			t.Error("catalogued fields take a number for an array")
		}
	})
}

// TestCatalogMergesRegistry: a kind this client registers but no node
// published is listed from the registry, not live; one both know keeps the
// catalog's entry and is marked registered.
func TestCatalogMergesRegistry(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		old := time.Now().Add(-time.Hour)
		err := store.CatalogPublish(ctx, &twicestore.CatalogPublishParams{Node: "gone", Now: old, Kinds: []twicetype.KindInfo{
			{Kind: "report.monthly.v1", Queue: "old-reports", Strategy: "none"},
			{Kind: "legacy.export.v1", Queue: "default", Strategy: "claim-after"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		c := adminClient(t, store, adminRegistry(t))
		cat, err := c.Catalog(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]twice.CatalogKind{}
		for _, k := range cat {
			got[k.Kind] = k
		}
		if k := got["billing.charge.v1"]; !k.Registered || k.Live || !k.FailClosed || len(k.Args) != 3 {
			t.Errorf("registered-only kind: %+v", k)
		}
		if k := got["report.monthly.v1"]; !k.Registered || k.Live || k.Queue != "old-reports" || k.Node != "gone" {
			t.Errorf("kind in both: %+v, want the catalog's entry, registered, not live", k)
		}
		if k := got["legacy.export.v1"]; k.Registered || k.Live {
			t.Errorf("catalog-only kind of a dead node: %+v", k)
		}
		if len(cat) != 3 || cat[0].Kind != "billing.charge.v1" || cat[2].Kind != "report.monthly.v1" {
			t.Errorf("catalog not sorted by kind: %+v", cat)
		}
	})
}

// TestNewClientWarnsUnservedQueue: a kind whose queue the config does not
// work is logged at NewClient, naming the kind and the queue.
func TestNewClientWarnsUnservedQueue(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	cfg := testConfig(adminRegistry(t)) // report.monthly.v1 goes to "reports"
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	if _, err := twice.NewClient(newStore(t), cfg); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "kind=report.monthly.v1") || !strings.Contains(out, "queue=reports") {
		t.Fatalf("no warning for the unserved queue:\n%s", out)
	}
	if strings.Contains(out, "billing.charge.v1") {
		t.Fatalf("warned about a kind in a served queue:\n%s", out)
	}

	var quiet syncBuffer
	cfg.Queues = []twice.QueueConfig{{Name: twice.QueueDefault}, {Name: "reports"}}
	cfg.Logger = slog.New(slog.NewTextHandler(&quiet, nil))
	if _, err := twice.NewClient(newStore(t), cfg); err != nil {
		t.Fatal(err)
	}
	if quiet.String() != "" {
		t.Fatalf("warned with every queue served:\n%s", quiet.String())
	}
}

// TestCatalogRepublishedWithHeartbeat: a running worker publishes its kinds
// again with every node heartbeat (every 10 s), so LastSeen moves and a
// kind stays live while its worker runs. The wait is the heartbeat's.
func TestCatalogRepublishedWithHeartbeat(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for one node heartbeat (10 s)")
	}
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		cfg := testConfig(adminRegistry(t))
		cfg.Queues = []twice.QueueConfig{{Name: twice.QueueDefault}, {Name: "reports"}}
		startClient(t, store, cfg)
		lastSeen := func() time.Time {
			res, err := store.CatalogList(ctx, &twicestore.CatalogListParams{})
			if err != nil || len(res.Kinds) == 0 {
				t.Fatalf("catalog: %+v, %v", res, err)
			}
			return res.Kinds[0].LastSeen
		}
		// Start publishes, and so does the node loop's first round, right
		// after; two more publishes prove the periodic one.
		seen := []time.Time{lastSeen()}
		waitfor.CondWithin(t, time.Minute, "the catalog to be published twice more", func() bool {
			if l := lastSeen(); l.After(seen[len(seen)-1]) {
				seen = append(seen, l)
			}
			return len(seen) == 3
		}, func() string { return fmt.Sprint("last seen at ", seen) })
		t.Logf("%T: published again after %s, then after %s", store,
			seen[1].Sub(seen[0]).Round(time.Millisecond), seen[2].Sub(seen[1]).Round(time.Millisecond))
	})
}
