package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// Upgrade checks: a database a twice of an older migration version left
// behind upgrades cleanly and its rows keep their meaning. Run cannot hold
// them, since its stores are fresh and at the latest version; a driver
// runs each from a test of its own, giving a hook that builds its database
// at the old version.

// OldSchema is a driver's database held at an old migration version, for
// the upgrade checks. Its writes go around the store, in the driver's own
// SQL, the way a twice of that version wrote its rows; each fails the test
// on error.
type OldSchema interface {
	// InsertJob writes a job of kind "k.v1" in queue "default", with args
	// {} and three attempts, holding uniqueKey in state. It is due and
	// created at once, and finished at once when state is a finished one.
	InsertJob(t *testing.T, uniqueKey string, state twicetype.JobState)
	// Complete sets job id completed and finished, around the store (a
	// job inserted through the store after Upgrade).
	Complete(t *testing.T, id int64)
	// Upgrade opens the driver's store on the database, which applies the
	// migrations past the old version, and returns it, to be closed when
	// the test ends.
	Upgrade(t *testing.T) twicestore.Store
}

// UniqueStatesUpgrade checks migration 014 (the states in which a job
// holds its unique key): a database at migration 013 upgrades cleanly, and
// its jobs keep the uniqueness they had (held while available or running,
// free once finished), while new jobs can hold keys when finished. openAt
// returns a fresh database, of the test's own, with the driver's
// migrations 1 to version applied and recorded.
func UniqueStatesUpgrade(t *testing.T, openAt func(t *testing.T, version int) OldSchema) {
	ctx := t.Context()
	old := openAt(t, 13)
	// A waiting job holding "waiting" and a completed one that held "done".
	old.InsertJob(t, "waiting", twicetype.JobStateAvailable)
	old.InsertJob(t, "done", twicetype.JobStateCompleted)

	s := old.Upgrade(t)
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
	old.Complete(t, kept.Job.ID)
	if r := insert("kept", 0); !r.Duplicate || r.Job.ID != kept.Job.ID {
		t.Errorf("a completed job with completed among its states: Duplicate %v of job %d, want a duplicate of %d",
			r.Duplicate, r.Job.ID, kept.Job.ID)
	}
}

// UniqueStatesPredicate checks that a driver's migration 014, given by its
// version, name and text, creates the unique index with the very
// predicate the queries render from twicetype's bits
// (driverkit.UniqueHeldSQL): SQLite uses a partial index only for a WHERE
// that repeats its terms, and the queries must agree with the index.
func UniqueStatesPredicate(t *testing.T, version int, name, sql string) {
	if version != 14 {
		t.Fatalf("migration %s is version %d, want 14", name, version)
	}
	if !strings.Contains(strings.Join(strings.Fields(sql), " "), driverkit.UniqueHeldSQL("")) {
		t.Errorf("migration %s lacks the predicate\n%s", name, driverkit.UniqueHeldSQL(""))
	}
}
