package twicepg

import (
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// TestMigration014UniqueStates: a database at migration 013 upgrades
// cleanly, and its jobs keep today's uniqueness (held while available or
// running, free once finished), while new jobs can hold keys when finished.
func TestMigration014UniqueStates(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	connString, _ := newSchema(t)
	conn := connect(t, ctx, connString)
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, createMigrationsTable); err != nil {
		t.Fatal(err)
	}
	for _, m := range embedded[:13] {
		if _, err := conn.Exec(ctx, m.SQL); err != nil {
			t.Fatalf("apply %s: %v", m.Name, err)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO twice_migrations (version, name, applied_at) VALUES ($1, $2, now())`,
			m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	// A waiting job holding "waiting" and a completed one that held "done".
	if _, err := conn.Exec(ctx, `INSERT INTO twice_jobs (kind, queue, args, unique_key, state, max_attempts, run_at, created_at, finished_at)
		VALUES ('k.v1', 'default', '\x7b7d', 'waiting', 'available', 3, now(), now(), NULL),
		       ('k.v1', 'default', '\x7b7d', 'done', 'completed', 3, now(), now(), now())`); err != nil {
		t.Fatal(err)
	}

	s := openAt(t, connString)
	if applied, latest, err := s.SchemaVersion(ctx); err != nil || applied != latest {
		t.Fatalf("SchemaVersion = %d, %d, %v", applied, latest, err)
	}
	insert := func(key string, states twicetype.UniqueStates) *twicestore.JobInsertResult {
		t.Helper()
		res, err := s.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{{
			Kind: "k.v1", Queue: "default", MaxAttempts: 1, UniqueKey: key, UniqueStates: states, CreatedAt: time.Now()}}})
		if err != nil {
			t.Fatal(err)
		}
		return res.Jobs[0]
	}
	if r := insert("waiting", 0); !r.Duplicate {
		t.Errorf("a job waiting from before the upgrade does not hold its key")
	}
	if r := insert("done", 0); r.Duplicate {
		t.Errorf("a job completed before the upgrade holds its key (job %d)", r.Job.ID)
	}
	// The new index takes keys held once completed.
	kept := insert("kept", twicetype.UniqueStatesDefault|twicetype.UniqueCompleted)
	if _, err := conn.Exec(ctx, `UPDATE twice_jobs SET state = 'completed', finished_at = now() WHERE id = $1`, kept.Job.ID); err != nil {
		t.Fatal(err)
	}
	if r := insert("kept", 0); !r.Duplicate || r.Job.ID != kept.Job.ID {
		t.Errorf("a completed job with completed among its states: Duplicate %v of job %d, want a duplicate of %d",
			r.Duplicate, r.Job.ID, kept.Job.ID)
	}
}

// TestMigration014PredicateMatches: the index predicate of migration 014
// is the one the queries render from twicetype's bits.
func TestMigration014PredicateMatches(t *testing.T) {
	t.Parallel()
	m := embedded[13]
	if m.Version != 14 {
		t.Fatalf("embedded[13] is migration %d", m.Version)
	}
	if !strings.Contains(strings.Join(strings.Fields(m.SQL), " "), twicestore.UniqueHeldSQL("")) {
		t.Errorf("migration %s lacks the predicate\n%s", m.Name, twicestore.UniqueHeldSQL(""))
	}
}
