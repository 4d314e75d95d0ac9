package twicesqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// TestUpgradeKeepsStoredSwitches migrates a database that has switches
// stored before migration 010: they read back as never expiring, with no
// history, and the first change after the upgrade records their state as
// its previous one.
func TestUpgradeKeepsStoredSwitches(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "twice.db")
	db, err := sql.Open("sqlite", DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, createMigrationsTable); err != nil {
		t.Fatal(err)
	}
	for _, m := range embedded[:9] {
		if _, err := db.ExecContext(ctx, m.SQL); err != nil {
			t.Fatalf("apply %s: %v", m.Name, err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO twice_migrations (version, name, applied_at) VALUES (?, ?, 0)`,
			m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	set := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	if _, err := db.ExecContext(ctx, `INSERT INTO twice_toggles (kind, enabled, reason, set_by, set_at)
		VALUES ('balance.credit.v1', 0, 'INC-1', 'ops', ?)`, set.UnixMicro()); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
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

// benchKinds returns n catalogued kinds of a realistic size: a few args
// fields and a schedule each.
func benchKinds(n int) []twicetype.KindInfo {
	kinds := make([]twicetype.KindInfo, n)
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
	return kinds
}

// BenchmarkCatalogPublish times what a node adds to each heartbeat: the
// publish of 50 kinds, all already catalogued.
func BenchmarkCatalogPublish(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	p := &twicestore.CatalogPublishParams{Node: "node-a", Kinds: benchKinds(50)}
	for b.Loop() {
		if err := s.CatalogPublish(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
}
