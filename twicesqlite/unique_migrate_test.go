package twicesqlite

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicestore/storetest"
	"github.com/twicejobs/twice/twicetype"
)

func TestMigration014UniqueStates(t *testing.T) {
	t.Parallel()
	storetest.UniqueStatesUpgrade(t, openOldSchema)
}

// TestMigration019PredicateMatches: the unique index is created last by
// migration 019 (the waiting state), with the predicate the queries render.
func TestMigration019PredicateMatches(t *testing.T) {
	t.Parallel()
	m := embedded[18]
	if m.Version != 19 {
		t.Fatalf("migration %s is version %d, want 19", m.Name, m.Version)
	}
	storetest.UniqueStatesPredicate(t, m.Name, m.SQL)
}

// oldSchema is a database file held at an old migration version (times
// are stored as integers, so small ones will do).
type oldSchema struct{ db *sql.DB }

// openOldSchema returns a new database file with migrations 1 to version
// applied and recorded, as a twice of that version left it.
func openOldSchema(t *testing.T, version int) storetest.OldSchema {
	t.Helper()
	ctx := t.Context()
	db, err := sql.Open("sqlite", DSN(filepath.Join(t.TempDir(), fmt.Sprintf("v%d.db", version))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.ExecContext(ctx, createMigrationsTable); err != nil {
		t.Fatal(err)
	}
	for _, m := range embedded[:version] {
		if _, err := db.ExecContext(ctx, m.SQL); err != nil {
			t.Fatalf("apply %s: %v", m.Name, err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO twice_migrations (version, name, applied_at) VALUES (?, ?, 0)`,
			m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	return oldSchema{db}
}

func (o oldSchema) InsertJob(t *testing.T, uniqueKey string, state twicetype.JobState) {
	t.Helper()
	var finishedAt any
	if state.Finished() {
		finishedAt = 2
	}
	if _, err := o.db.ExecContext(t.Context(), `INSERT INTO twice_jobs (kind, queue, args, unique_key, state, max_attempts, run_at, created_at, finished_at)
		VALUES ('k.v1', 'default', x'7b7d', ?, ?, 3, 1, 1, ?)`, uniqueKey, string(state), finishedAt); err != nil {
		t.Fatal(err)
	}
}

func (o oldSchema) Complete(t *testing.T, id int64) {
	t.Helper()
	if _, err := o.db.ExecContext(t.Context(), `UPDATE twice_jobs SET state = 'completed', finished_at = 3 WHERE id = ?`, id); err != nil {
		t.Fatal(err)
	}
}

func (o oldSchema) Upgrade(t *testing.T) twicestore.Store {
	t.Helper()
	s, err := New(t.Context(), o.db)
	if err != nil {
		t.Fatalf("migrate from the old version: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
