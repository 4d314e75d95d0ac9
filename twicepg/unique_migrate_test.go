package twicepg

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicestore/storetest"
	"github.com/twicejobs/twice/twicetype"
)

func TestMigration014UniqueStates(t *testing.T) {
	t.Parallel()
	storetest.UniqueStatesUpgrade(t, openOldSchema)
}

// TestMigration025PredicateMatches: the unique index is created last by
// migration 025 (the waiting state), with the predicate the queries render.
func TestMigration025PredicateMatches(t *testing.T) {
	t.Parallel()
	m := embedded[24]
	if m.Version != 25 {
		t.Fatalf("migration %s is version %d, want 25", m.Name, m.Version)
	}
	storetest.UniqueStatesPredicate(t, m.Name, m.SQL)
}

// oldSchema is a schema of the test's own held at an old migration
// version, with a connection to write its rows around the store.
type oldSchema struct {
	connString string
	conn       *pgx.Conn
}

// openOldSchema returns a new schema with migrations 1 to version applied
// and recorded, as a twice of that version left it.
func openOldSchema(t *testing.T, version int) storetest.OldSchema {
	t.Helper()
	ctx := t.Context()
	connString, _ := newSchema(t)
	conn := connect(t, ctx, connString)
	// The test's context is cancelled before cleanups run.
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, createMigrationsTable); err != nil {
		t.Fatal(err)
	}
	for _, m := range embedded[:version] {
		if _, err := conn.Exec(ctx, m.SQL); err != nil {
			t.Fatalf("apply %s: %v", m.Name, err)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO twice_migrations (version, name, applied_at) VALUES ($1, $2, now())`,
			m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	return oldSchema{connString: connString, conn: conn}
}

func (o oldSchema) InsertJob(t *testing.T, uniqueKey string, state twicetype.JobState) {
	t.Helper()
	if _, err := o.conn.Exec(t.Context(), `INSERT INTO twice_jobs (kind, queue, args, unique_key, state, max_attempts, run_at, created_at, finished_at)
		VALUES ('k.v1', 'default', '\x7b7d', $1, $2, 3, now(), now(), CASE WHEN $3 THEN now() END)`,
		uniqueKey, string(state), state.Finished()); err != nil {
		t.Fatal(err)
	}
}

func (o oldSchema) Complete(t *testing.T, id int64) {
	t.Helper()
	if _, err := o.conn.Exec(t.Context(), `UPDATE twice_jobs SET state = 'completed', finished_at = now() WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
}

func (o oldSchema) Upgrade(t *testing.T) twicestore.Store {
	t.Helper()
	return openAt(t, o.connString)
}
