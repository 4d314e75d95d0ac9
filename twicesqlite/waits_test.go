package twicesqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// TestUniqueIndexPredicateMatches checks that the unique index a migrated
// database holds (migration 019's) has the very predicate the queries
// render (driverkit.UniqueHeldSQL): SQLite uses a partial index only for a WHERE
// that repeats its terms, and INDEXED BY fails without it.
func TestUniqueIndexPredicateMatches(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	var ddl string
	if err := s.db.QueryRowContext(t.Context(), `SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'twice_jobs_unique'`).Scan(&ddl); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(strings.Fields(ddl), " "), driverkit.UniqueHeldSQL("")) {
		t.Errorf("twice_jobs_unique is\n%s\nwithout the predicate\n%s", ddl, driverkit.UniqueHeldSQL(""))
	}
	if !strings.Contains(driverkit.UniqueHeldSQL(""), "WHEN 'waiting' THEN 2 ") {
		t.Errorf("driverkit.UniqueHeldSQL does not hold a waiting job's key under the running bit: %s", driverkit.UniqueHeldSQL(""))
	}
}

// TestMigration019KeepsJobs upgrades a database at version 18 holding a
// job in every state it knew (one with a unique key held, a deleted
// newest job): every column of every job is kept, the new ones start
// empty, ids are not reused, and the table has every index and trigger a
// fresh database has.
func TestMigration019KeepsJobs(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	old := openOldSchema(t, 18).(oldSchema)
	for _, st := range twicetype.AllJobStates {
		if st != twicetype.JobStateWaiting {
			old.InsertJobAt(t, st, 5)
		}
	}
	old.InsertJob(t, "held", twicetype.JobStateAvailable)
	if _, err := old.db.ExecContext(ctx, `UPDATE twice_jobs SET output = '{"n":1}', trace = 'tp', metadata = '{"a":"b"}',
		concurrency_key = 'ck', cancel_by = 'ops', snoozes = 2 WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	old.InsertJob(t, "", twicetype.JobStateAvailable)
	var newest int64
	if err := old.db.QueryRowContext(ctx, `SELECT MAX(id) FROM twice_jobs`).Scan(&newest); err != nil {
		t.Fatal(err)
	}
	if _, err := old.db.ExecContext(ctx, `DELETE FROM twice_jobs WHERE id = ?`, newest); err != nil {
		t.Fatal(err)
	}
	before := dumpJobs(t, old.db)

	s := old.Upgrade(t)
	if after := dumpJobs(t, old.db); after != before {
		t.Errorf("jobs before the upgrade:\n%s\nafter:\n%s", before, after)
	}
	var extra int
	if err := old.db.QueryRowContext(ctx, `SELECT count(*) FROM twice_jobs WHERE wait_name <> '' OR signal_seq <> 0`).Scan(&extra); err != nil || extra != 0 {
		t.Errorf("%d jobs have a wait after the upgrade (%v)", extra, err)
	}
	res, err := s.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{
		{Kind: "k.v1", Queue: "default", MaxAttempts: 1},
		{Kind: "k.v1", Queue: "default", MaxAttempts: 1, UniqueKey: "held"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if id := res.Jobs[0].Job.ID; id <= newest {
		t.Errorf("a job inserted after the upgrade has id %d, at or below the deleted %d", id, newest)
	}
	if !res.Jobs[1].Duplicate {
		t.Errorf("a key held before the upgrade is free after it")
	}
	fresh := openTemp(t)
	if got, want := schemaOf(t, old.db), schemaOf(t, fresh.db); got != want {
		t.Errorf("upgraded schema:\n%s\nfresh schema:\n%s", got, want)
	}
}

// dumpJobs renders every column of every job, in id order.
func dumpJobs(t *testing.T, db *sql.DB) string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT id, kind, queue, priority, args, message_id, idempotency_key,
		correlation_id, unique_key, state, attempt, max_attempts, epoch, run_at, lease_until, attempted_by, errors, note,
		created_at, finished_at, metadata, cancel_requested_at, cancel_by, cancel_reason, snoozes, concurrency_key,
		parent_id, workflow_id, workflow_task, batch_id, output, unique_states, trace FROM twice_jobs ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for row, err := range dbrows.Iter(rows) {
		if err != nil {
			t.Fatal(err)
		}
		if err := row.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			if b, ok := v.([]byte); ok {
				v = string(b)
			}
			fmt.Fprintf(&sb, "%s=%v ", cols[i], v)
		}
		sb.WriteString("\n")
	}
	return sb.String()
}

// schemaOf lists the tables, indexes and triggers of a database with
// their definitions, whitespace folded.
func schemaOf(t *testing.T, db *sql.DB) string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT type, name, coalesce(sql, '') FROM sqlite_master
		WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name`)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for row, err := range dbrows.Iter(rows) {
		if err != nil {
			t.Fatal(err)
		}
		var typ, name, ddl string
		if err := row.Scan(&typ, &name, &ddl); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&sb, "%s %s: %s\n", typ, name, strings.Join(strings.Fields(ddl), " "))
	}
	return sb.String()
}

// waitEnv is a store with helpers for the driver's own wait tests.
type waitEnv struct {
	t    *testing.T
	s    *Store
	base time.Time
}

func (e waitEnv) insert(p *twicestore.JobInsertParams) int64 {
	e.t.Helper()
	if p == nil {
		p = &twicestore.JobInsertParams{}
	}
	p.Kind, p.Queue, p.MaxAttempts, p.CreatedAt = "w.v1", "default", 3, e.base
	res, err := e.s.JobInsertMany(e.t.Context(), &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{p}})
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Jobs[0].Job.ID
}

func (e waitEnv) fetch() *twicetype.JobRow {
	e.t.Helper()
	res, err := e.s.JobFetch(e.t.Context(), &twicestore.JobFetchParams{Queue: "default", Kinds: []string{"w.v1"}, Limit: 1,
		Now: e.base, LeaseUntil: e.base.Add(time.Minute), Node: "n"})
	if err != nil || len(res.Jobs) != 1 {
		e.t.Fatalf("fetch: %d jobs, %v", len(res.Jobs), err)
	}
	return res.Jobs[0]
}

func (e waitEnv) finish(o *twicestore.JobOutcome) {
	e.t.Helper()
	res, err := e.s.JobFinish(e.t.Context(), &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{o}})
	if err != nil || !res.Applied[0] {
		e.t.Fatalf("finish %+v: %v", o, err)
	}
}

func (e waitEnv) park(j *twicetype.JobRow, name string) {
	e.t.Helper()
	e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateWaiting, WaitName: name,
		SignalSeq: j.SignalSeq, RefundAttempt: true})
}

func (e waitEnv) signal(id int64, name string) {
	e.t.Helper()
	if _, err := e.s.JobSignal(e.t.Context(), &twicestore.JobSignalParams{JobID: id, Name: name, Payload: []byte(`1`), Now: e.base}); err != nil {
		e.t.Fatal(err)
	}
}

func (e waitEnv) signalCount(id int64) int {
	e.t.Helper()
	var n int
	if err := e.s.db.QueryRowContext(e.t.Context(), `SELECT count(*) FROM twice_signals WHERE job_id = ?`, id).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// TestWaitSignalsPruned: retention (with a Limit) deletes a finished job's
// signals with it, never a waiting job, and a delete by hand takes a
// waiting job's signals.
func TestWaitSignalsPruned(t *testing.T) {
	t.Parallel()
	e := waitEnv{t: t, s: openTemp(t), base: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ctx := t.Context()
	waiting := e.insert(nil)
	e.park(e.fetch(), "a")
	e.signal(waiting, "b")
	done := e.insert(nil)
	j := e.fetch()
	e.signal(done, "a")
	e.signal(done, "c")
	e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted, FinishedAt: e.base})
	far := e.base.Add(1000 * time.Hour)
	res, err := e.s.JobDeleteFinished(ctx, &twicestore.JobDeleteFinishedParams{CompletedBefore: far, DeadBefore: far,
		DiscardedBefore: far, CancelledBefore: far, Limit: 100})
	if err != nil || res.Deleted != 1 {
		t.Fatalf("JobDeleteFinished = %+v, %v; want the finished job only", res, err)
	}
	if n := e.signalCount(done); n != 0 {
		t.Errorf("%d signals of a pruned job are left", n)
	}
	if n := e.signalCount(waiting); n != 1 {
		t.Errorf("the waiting job has %d signals after retention, want 1", n)
	}
	if _, err := e.s.JobDelete(ctx, &twicestore.JobBulkParams{Filter: twicestore.JobFilter{IDs: []int64{waiting}}}); err != nil {
		t.Fatal(err)
	}
	if n := e.signalCount(waiting); n != 0 {
		t.Errorf("%d signals of a deleted job are left", n)
	}
}

// TestWaitBatchCounts: a batch's job that parks stays pending (the batch
// triggers count waiting among the unfinished states), and when it is
// cancelled while waiting, the batch counts it cancelled and finishes.
func TestWaitBatchCounts(t *testing.T) {
	t.Parallel()
	e := waitEnv{t: t, s: openTemp(t), base: time.Now().Add(time.Second)}
	ctx := t.Context()
	b, err := e.s.BatchInsert(ctx, &twicestore.BatchInsertParams{
		Callback: &twicestore.JobInsertParams{Kind: "cb.v1", Queue: "default", MaxAttempts: 1},
		Jobs:     []*twicestore.JobInsertParams{{Kind: "w.v1", Queue: "default", MaxAttempts: 3}},
	})
	if err != nil {
		t.Fatal(err)
	}
	get := func() *twicetype.Batch {
		t.Helper()
		got, err := e.s.BatchGet(ctx, &twicestore.BatchGetParams{ID: b.Batch.ID})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	e.park(e.fetch(), "approve")
	if got := get(); got.Pending != 1 || !got.FinishedAt.IsZero() || got.CallbackJobID != 0 {
		t.Fatalf("after the park the batch = %+v, want one job pending", got)
	}
	id := b.Jobs[0].Job.ID
	if _, err := e.s.JobCancel(ctx, &twicestore.JobCancelParams{Filter: twicestore.JobFilter{IDs: []int64{id}}, By: "ops", Now: e.base}); err != nil {
		t.Fatal(err)
	}
	if got := get(); got.Pending != 0 || got.Cancelled != 1 || got.CallbackJobID == 0 {
		t.Fatalf("after the cancel the batch = %+v, want one job cancelled and its callback", got)
	}
	if _, err := e.s.JobSignal(ctx, &twicestore.JobSignalParams{JobID: id, Name: "approve"}); !errors.Is(err, twicestore.ErrJobFinished) {
		t.Fatalf("JobSignal to the cancelled job = %v, want ErrJobFinished", err)
	}
}
