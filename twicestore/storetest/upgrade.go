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

// UniqueStatesPredicate checks that the driver's migration that last
// creates the unique index (given by its name and text) creates it with
// the very predicate the queries render from twicetype's bits
// (driverkit.UniqueHeldSQL): SQLite uses a partial index only for a WHERE
// that repeats its terms, and the queries must agree with the index.
func UniqueStatesPredicate(t *testing.T, name, sql string) {
	if !strings.Contains(strings.Join(strings.Fields(sql), " "), driverkit.UniqueHeldSQL("")) {
		t.Errorf("migration %s lacks the predicate\n%s", name, driverkit.UniqueHeldSQL(""))
	}
}

// OldRows is an OldSchema that also writes, around the store, the rows the
// trace upgrade check needs, the way a twice of that version wrote them.
type OldRows interface {
	OldSchema
	// InsertJobAt writes a job as InsertJob does (no unique key), at lease
	// epoch epoch and with one attempt error, "boom" at attempt 1, and
	// returns its id.
	InsertJobAt(t *testing.T, state twicetype.JobState, epoch int64) int64
	// InsertMarker writes handler's marker of key, claimed by job id in
	// epoch.
	InsertMarker(t *testing.T, handler, key string, id, epoch int64)
	// InsertWorkflow writes a running workflow of two tasks of kind
	// "k.v1", a then b: a's job available, b waiting for it. It returns the
	// workflow's id and a's job id.
	InsertWorkflow(t *testing.T) (wf, a int64)
}

// jobInEveryState writes, at the old version, one job in each state at
// epoch 5, and a marker "h"/"key-1" claimed by the completed one, and
// returns the jobs' ids by state.
func jobInEveryState(t *testing.T, old OldRows) map[twicetype.JobState]int64 {
	ids := map[twicetype.JobState]int64{}
	for _, st := range twicetype.AllJobStates {
		if st == twicetype.JobStateWaiting {
			continue // a state no old schema holds
		}
		ids[st] = old.InsertJobAt(t, st, 5)
	}
	old.InsertMarker(t, "h", "key-1", ids[twicetype.JobStateCompleted], 5)
	return ids
}

// TraceUpgrade checks the migration that adds a job's trace (PostgreSQL's
// 020, SQLite's 018), from version, the one before it: jobs in every
// state keep their state, epoch, error history and markers, with an empty
// trace; and a workflow in flight across the upgrade goes on, its waiting
// task released, by the replaced release, with its dependency's trace.
func TraceUpgrade(t *testing.T, openAt func(t *testing.T, version int) OldRows, version int) {
	ctx := t.Context()
	old := openAt(t, version)
	ids := jobInEveryState(t, old)
	wf, a := old.InsertWorkflow(t)

	s := old.Upgrade(t)
	if applied, latest, err := s.SchemaVersion(ctx); err != nil || applied != latest {
		t.Fatalf("SchemaVersion = %d, %d, %v", applied, latest, err)
	}
	for st, id := range ids {
		j, err := s.JobGet(ctx, &twicestore.JobGetParams{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if j.State != st || j.Epoch != 5 || len(j.Errors) != 1 || j.Errors[0].Error != "boom" || j.Trace != "" {
			t.Errorf("job %d (%s) after the upgrade: state %s, epoch %d, errors %v, trace %q", id, st, j.State, j.Epoch, j.Errors, j.Trace)
		}
	}
	if m, err := s.MarkerPeek(ctx, &twicestore.MarkerParams{Handler: "h", Key: "key-1"}); err != nil || !m.Processed ||
		m.Marker.JobID != ids[twicetype.JobStateCompleted] || m.Marker.Epoch != 5 {
		t.Errorf("the marker after the upgrade: %+v, %v", m, err)
	}

	// The workflow goes on: a completes with a trace, and b is released
	// with it.
	now := time.Now()
	var leased *twicetype.JobRow
	res, err := s.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "default", Kinds: []string{"k.v1"}, Limit: 100,
		Node: "n", Now: now.Add(time.Hour), LeaseUntil: now.Add(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range res.Jobs {
		if j.ID == a {
			leased = j
		}
	}
	if leased == nil {
		t.Fatalf("task a's job %d was not fetched after the upgrade", a)
	}
	const trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	fin, err := s.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{ID: a, Epoch: leased.Epoch,
		State: twicetype.JobStateCompleted, FinishedAt: now, Trace: trace}}})
	if err != nil || !fin.Applied[0] {
		t.Fatalf("complete task a: %+v, %v", fin, err)
	}
	g, err := s.WorkflowGet(ctx, &twicestore.WorkflowGetParams{ID: wf})
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range g.Tasks {
		if task.Name == "b" && (task.Job == nil || task.Job.State != twicetype.JobStateAvailable || task.Job.Trace != trace) {
			t.Errorf("task b after a completed: %+v, want its job available with a's trace", task.Job)
		}
	}
}

// HotPathUpgrade checks an upgrade to the latest schema from version:
// PostgreSQL's 20, the schema before migration 021 rebuilt the by-state and
// by-kind indexes without running jobs; SQLite's schema did not change
// with it, and its test upgrades from its version 17. Jobs in every state
// keep their state, epoch and error history, a marker keeps its claim, and
// every way the tools look for jobs still finds each one: by state, by kind
// (the running job among them) and counted. The running job's lease, taken
// before the upgrade, completes under its epoch, and retention then deletes
// the finished jobs, state by state.
func HotPathUpgrade(t *testing.T, openAt func(t *testing.T, version int) OldRows, version int) {
	ctx := t.Context()
	old := openAt(t, version)
	ids := jobInEveryState(t, old)

	s := old.Upgrade(t)
	if applied, latest, err := s.SchemaVersion(ctx); err != nil || applied != latest {
		t.Fatalf("SchemaVersion = %d, %d, %v", applied, latest, err)
	}
	list := func(f twicestore.JobFilter) []int64 {
		t.Helper()
		res, err := s.JobList(ctx, &twicestore.JobListParams{Filter: f})
		if err != nil {
			t.Fatalf("JobList(%+v): %v", f, err)
		}
		var got []int64
		for _, j := range res.Jobs {
			got = append(got, j.ID)
		}
		return got
	}
	for st, id := range ids {
		j, err := s.JobGet(ctx, &twicestore.JobGetParams{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if j.State != st || j.Epoch != 5 || j.Attempt != 1 || len(j.Errors) != 1 || j.Errors[0].Error != "boom" {
			t.Errorf("job %d (%s) after the upgrade: state %s, epoch %d, attempt %d, errors %v",
				id, st, j.State, j.Epoch, j.Attempt, j.Errors)
		}
		if got := list(twicestore.JobFilter{State: st}); len(got) != 1 || got[0] != id {
			t.Errorf("jobs listed as %s after the upgrade: %v, want [%d]", st, got, id)
		}
		if got := list(twicestore.JobFilter{State: st, Kind: "k.v1"}); len(got) != 1 || got[0] != id {
			t.Errorf("jobs of k.v1 listed as %s after the upgrade: %v, want [%d]", st, got, id)
		}
	}
	if got := list(twicestore.JobFilter{Kind: "k.v1"}); len(got) != len(ids) {
		t.Errorf("jobs of k.v1 after the upgrade: %v, want all %d, running among them (%d)", got, len(ids), ids[twicetype.JobStateRunning])
	}
	counts, err := s.JobCount(ctx, &twicestore.JobCountParams{Filter: twicestore.JobFilter{Kind: "k.v1"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(counts.Counts) != len(ids) {
		t.Errorf("counts of k.v1 after the upgrade: %+v, want one job in each of %d states", counts.Counts, len(ids))
	}
	if m, err := s.MarkerPeek(ctx, &twicestore.MarkerParams{Handler: "h", Key: "key-1"}); err != nil || !m.Processed ||
		m.Marker.JobID != ids[twicetype.JobStateCompleted] || m.Marker.Epoch != 5 {
		t.Errorf("the marker after the upgrade: %+v, %v", m, err)
	}

	running := ids[twicetype.JobStateRunning]
	fin, err := s.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{ID: running, Epoch: 5,
		State: twicetype.JobStateCompleted, FinishedAt: time.Now()}}})
	if err != nil || !fin.Applied[0] {
		t.Fatalf("complete the lease taken before the upgrade: %+v, %v", fin, err)
	}
	if got := list(twicestore.JobFilter{State: twicetype.JobStateRunning}); len(got) != 0 {
		t.Errorf("running jobs after the last one completed: %v", got)
	}
	if got := list(twicestore.JobFilter{State: twicetype.JobStateCompleted}); len(got) != 2 {
		t.Errorf("completed jobs: %v, want the two completed ones", got)
	}
	later := time.Now().Add(time.Hour)
	del, err := s.JobDeleteFinished(ctx, &twicestore.JobDeleteFinishedParams{CompletedBefore: later, DeadBefore: later,
		DiscardedBefore: later, CancelledBefore: later, Limit: 100})
	if err != nil || del.Deleted != len(ids)-1 {
		t.Errorf("JobDeleteFinished after the upgrade: %+v, %v, want every job but the available one deleted", del, err)
	}
	if got := list(twicestore.JobFilter{}); len(got) != 1 || got[0] != ids[twicetype.JobStateAvailable] {
		t.Errorf("jobs left: %v, want only the available one (%d)", got, ids[twicetype.JobStateAvailable])
	}
}
