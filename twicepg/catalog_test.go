package twicepg

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// TestUpgradeKeepsStoredSwitches migrates a schema that has switches
// stored before migration 010: they read back as never expiring, with no
// history, and the first change after the upgrade records their state as
// its previous one.
func TestUpgradeKeepsStoredSwitches(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	connString, _ := newSchema(t)
	conn := connect(t, ctx, connString)
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, createMigrationsTable); err != nil {
		t.Fatal(err)
	}
	for _, m := range embedded[:9] {
		if _, err := conn.Exec(ctx, m.SQL); err != nil {
			t.Fatalf("apply %s: %v", m.Name, err)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO twice_migrations (version, name, applied_at) VALUES ($1, $2, now())`,
			m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	set := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	if _, err := conn.Exec(ctx, `INSERT INTO twice_toggles (kind, enabled, reason, set_by, set_at)
		VALUES ('balance.credit.v1', false, 'INC-1', 'ops', $1)`, set); err != nil {
		t.Fatal(err)
	}

	s := openAt(t, connString)
	list, err := s.ToggleList(ctx, &twicestore.ToggleListParams{Now: set.Add(24 * 365 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	want := twicetype.Toggle{Kind: "balance.credit.v1", Enabled: false, Reason: "INC-1", By: "ops", At: set}
	if len(list.Toggles) != 1 || list.Toggles[0] != want {
		t.Fatalf("after the upgrade ToggleList = %+v, want only %+v", list.Toggles, want)
	}
	if err := s.ToggleSet(ctx, &twicestore.ToggleSetParams{Toggle: twicetype.Toggle{
		Kind: "balance.credit.v1", Enabled: true, By: "ops", At: set.Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	h, err := s.ToggleHistory(ctx, &twicestore.ToggleHistoryParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Changes) != 1 || h.Changes[0].Previous != twicetype.ToggleOff || h.Changes[0].New != twicetype.ToggleOn {
		t.Fatalf("history after the first change since the upgrade = %+v, want one change off -> on", h.Changes)
	}
}

// BenchmarkCatalogPublish times what a node adds to each heartbeat: the
// publish of 50 kinds, all already catalogued, in one statement. It needs
// TWICE_TEST_POSTGRES.
func BenchmarkCatalogPublish(b *testing.B) {
	url, _ := pgtest.Schema(b, "bench_catalog")
	ctx := context.Background()
	s, err := Open(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	kinds := make([]twicetype.KindInfo, 50)
	for i := range kinds {
		kinds[i] = twicetype.KindInfo{
			Kind: fmt.Sprintf("bench.kind%03d.v1", i), Queue: "default", Strategy: "claim-after",
			MaxAttempts: 20, Timeout: time.Minute,
			Args: []twicetype.ArgField{
				{Name: "user_id", Type: twicetype.ArgTypeString},
				{Name: "amount", Type: twicetype.ArgTypeInteger},
				{Name: "email", Type: twicetype.ArgTypeString, Sensitive: true},
			},
			Schedules: []twicetype.KindSchedule{{Name: fmt.Sprint("sched", i), Spec: "@every 1h"}},
		}
	}
	p := &twicestore.CatalogPublishParams{Node: "node-a", Kinds: kinds}
	for b.Loop() {
		if err := s.CatalogPublish(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
}
