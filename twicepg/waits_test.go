package twicepg

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// TestUniqueHeldMatchesMigration: the predicate the queries render is the
// one migration 025 builds twice_jobs_unique_key with, term for term, so
// that the planner proves it and reads the index.
func TestUniqueHeldMatchesMigration(t *testing.T) {
	t.Parallel()
	m := embedded[24]
	if m.Version != 25 {
		t.Fatalf("embedded[24] is %s, version %d, want 25", m.Name, m.Version)
	}
	sql := strings.Join(strings.Fields(m.SQL), " ")
	if want := driverkit.UniqueHeldSQL(""); !strings.Contains(sql, want) {
		t.Errorf("migration %s lacks the predicate\n%s", m.Name, want)
	}
	if want := driverkit.UniqueHeldSQL("NEW"); !strings.Contains(sql, want) {
		t.Errorf("migration %s's claim trigger lacks the predicate\n%s", m.Name, want)
	}
	// The claims' follow-up of updates asks for the state's bit unset.
	bit := strings.TrimPrefix(strings.TrimSuffix(driverkit.UniqueHeldSQL("n"), " <> 0"), "n.unique_key <> '' AND ")
	if want := bit + " = 0"; !strings.Contains(sql, want) {
		t.Errorf("migration %s's twice_jobs_claims_moved lacks the predicate\n%s", m.Name, want)
	}
}

// parkOne inserts a job of kind wait.v1 (holding uniqueKey when not
// empty), fetches it and parks it on "approve" until timeout.
func parkOne(t *testing.T, s *Store, uniqueKey string, timeout time.Time) *twicetype.JobRow {
	t.Helper()
	ctx := t.Context()
	res, err := s.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{
		{Kind: "wait.v1", Queue: "default", MaxAttempts: 3, UniqueKey: uniqueKey}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Jobs[0].Duplicate {
		t.Fatalf("insert: a duplicate of job %d", res.Jobs[0].Job.ID)
	}
	now := time.Now()
	f, err := s.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "default", Kinds: []string{"wait.v1"}, Limit: 1,
		Node: "n", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || len(f.Jobs) != 1 {
		t.Fatalf("fetch: %+v, %v", f, err)
	}
	j := f.Jobs[0]
	fin, err := s.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{ID: j.ID, Epoch: j.Epoch,
		State: twicetype.JobStateWaiting, RunAt: timeout, WaitName: "approve", SignalSeq: j.SignalSeq, RefundAttempt: true}}})
	if err != nil || !fin.Applied[0] {
		t.Fatalf("park: %+v, %v", fin, err)
	}
	return j
}

// TestParkMovesTheJobToTheWaitingPartition: a parked job waits in
// twice_jobs_waiting, out of the live generations the fetch reads, and a
// signal brings it back to the generation new jobs enter.
func TestParkMovesTheJobToTheWaitingPartition(t *testing.T) {
	t.Parallel()
	s, connString := openStore(t)
	conn := connect(t, t.Context(), connString)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	j := parkOne(t, s, "", time.Time{})
	if got := partitionOf(t, conn, j.ID); got != "twice_jobs_waiting" {
		t.Errorf("a parked job is in %s, want twice_jobs_waiting", got)
	}
	res, err := s.JobSignal(t.Context(), &twicestore.JobSignalParams{JobID: j.ID, Name: "approve", Payload: []byte(`{"ok": true}`)})
	if err != nil || !res.Woke {
		t.Fatalf("JobSignal = %+v, %v", res, err)
	}
	var part string
	var gen, cur int
	if err := conn.QueryRow(t.Context(), `SELECT tableoid::regclass::text, gen, twice_jobs_gen() FROM twice_jobs WHERE id = $1`,
		j.ID).Scan(&part, &gen, &cur); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(part, "twice_jobs_live_") || gen != cur {
		t.Errorf("a woken job is in %s, generation %d; want the live generation new jobs enter, %d", part, gen, cur)
	}
	sig, err := s.JobSignalGet(t.Context(), &twicestore.JobSignalGetParams{JobID: j.ID, Name: "approve"})
	if err != nil || string(sig.Payload) != `{"ok": true}` {
		t.Errorf("JobSignalGet = %+v, %v; want the payload as sent", sig, err)
	}
}

// TestSignalPayloadMustBeJSON: a payload that is not JSON is refused as
// unstorable, and nothing is stored.
func TestSignalPayloadMustBeJSON(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	j := parkOne(t, s, "", time.Time{})
	_, err := s.JobSignal(t.Context(), &twicestore.JobSignalParams{JobID: j.ID, Name: "approve", Payload: []byte(`{"ok"`)})
	if !errors.Is(err, twicestore.ErrUnstorable) {
		t.Errorf("JobSignal with a payload that is not JSON: %v, want an unstorable error", err)
	}
	if got, err := s.JobGet(t.Context(), &twicestore.JobGetParams{ID: j.ID}); err != nil || got.State != twicetype.JobStateWaiting {
		t.Errorf("after the refused signal: %+v, %v; want the job waiting", got, err)
	}
}

// TestSQLEnqueueMeetsAWaitingHolder: twice_enqueue (patched by migration
// 025) finds a waiting job holding the key, as the Go insert does.
func TestSQLEnqueueMeetsAWaitingHolder(t *testing.T) {
	t.Parallel()
	s := newSQLSetup(t)
	s.publish(t, "wait.v1", "default", nil)
	j := parkOne(t, s.store, "order-1", time.Time{})
	var id int64
	if err := s.conn.QueryRow(t.Context(), `SELECT twice_enqueue('wait.v1', '{}', '{"unique_key": "order-1"}')`).Scan(&id); err != nil {
		t.Fatalf("twice_enqueue of a key a waiting job holds: %v", err)
	}
	if id != j.ID {
		t.Errorf("twice_enqueue returned job %d, want the waiting holder %d", id, j.ID)
	}
	var pinned bool
	if err := s.conn.QueryRow(t.Context(), `SELECT coalesce(proconfig, '{}') @> ARRAY['search_path=' || quote_ident($1) || ', pg_temp']
		FROM pg_proc WHERE proname = 'twice_enqueue' AND pronamespace = $1::regnamespace`, s.schema).Scan(&pinned); err != nil {
		t.Fatal(err)
	}
	if !pinned {
		t.Error("twice_enqueue lost its pinned search_path in migration 025")
	}
}

// TestWaitingBatchJobStaysPending: a batch counts a waiting job as
// pending: the park and the wake leave its counters alone, and the batch
// finishes when the job completes.
func TestWaitingBatchJobStaysPending(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	ctx := t.Context()
	b, err := s.BatchInsert(ctx, &twicestore.BatchInsertParams{Callback: &twicestore.JobInsertParams{Kind: "cb.v1", Queue: "cb", MaxAttempts: 1},
		Jobs: []*twicestore.JobInsertParams{{Kind: "wait.v1", Queue: "default", MaxAttempts: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	pending := func() int {
		t.Helper()
		got, err := s.BatchGet(ctx, &twicestore.BatchGetParams{ID: b.Batch.ID})
		if err != nil {
			t.Fatal(err)
		}
		return got.Pending
	}
	now := time.Now()
	f, err := s.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "default", Kinds: []string{"wait.v1"}, Limit: 1,
		Node: "n", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || len(f.Jobs) != 1 {
		t.Fatalf("fetch: %+v, %v", f, err)
	}
	j := f.Jobs[0]
	if _, err := s.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{ID: j.ID, Epoch: j.Epoch,
		State: twicetype.JobStateWaiting, WaitName: "go", RefundAttempt: true}}}); err != nil {
		t.Fatal(err)
	}
	if n := pending(); n != 1 {
		t.Fatalf("a batch with its job waiting has %d pending, want 1", n)
	}
	if _, err := s.JobSignal(ctx, &twicestore.JobSignalParams{JobID: j.ID, Name: "go"}); err != nil {
		t.Fatal(err)
	}
	if n := pending(); n != 1 {
		t.Fatalf("a batch with its job woken has %d pending, want 1", n)
	}
	f, err = s.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "default", Kinds: []string{"wait.v1"}, Limit: 1,
		Node: "n", Now: time.Now(), LeaseUntil: time.Now().Add(time.Minute)})
	if err != nil || len(f.Jobs) != 1 {
		t.Fatalf("fetch after the wake: %+v, %v", f, err)
	}
	j = f.Jobs[0]
	if _, err := s.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{ID: j.ID, Epoch: j.Epoch,
		State: twicetype.JobStateCompleted, FinishedAt: time.Now()}}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.BatchGet(ctx, &twicestore.BatchGetParams{ID: b.Batch.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got.Pending != 0 || got.Completed != 1 || got.FinishedAt.IsZero() {
		t.Errorf("batch after its job completed: pending %d, completed %d, finished %v; want 0, 1, finished",
			got.Pending, got.Completed, got.FinishedAt)
	}
}

// TestMigration025KeepsJobs: an upgrade from 024 keeps the jobs of a
// populated table in their states and partitions, and the unique keys
// their holders hold.
func TestMigration025KeepsJobs(t *testing.T) {
	t.Parallel()
	old := openOldSchema(t, 24).(oldSchema)
	ids := map[twicetype.JobState]int64{}
	for _, st := range twicetype.AllJobStates {
		if st == twicetype.JobStateWaiting {
			continue // no twice before 025 parks a job
		}
		ids[st] = old.InsertJobAt(t, st, 5)
	}
	old.InsertJob(t, "held", twicetype.JobStateRunning)
	s := old.Upgrade(t)
	ctx := t.Context()
	for st, id := range ids {
		j, err := s.JobGet(ctx, &twicestore.JobGetParams{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if j.State != st || j.Epoch != 5 || j.WaitName != "" || j.SignalSeq != 0 {
			t.Errorf("job %d (%s) after the upgrade: state %s, epoch %d, wait %q, seq %d", id, st, j.State, j.Epoch, j.WaitName, j.SignalSeq)
		}
	}
	res, err := s.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{
		{Kind: "k.v1", Queue: "default", MaxAttempts: 3, UniqueKey: "held"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Jobs[0].Duplicate {
		t.Errorf("the key a running job held before the upgrade was taken by job %d", res.Jobs[0].Job.ID)
	}
}

// TestParkMeetsAConcurrentSignal: a signal and a park of the same job
// racing, in both orders, never leave the job waiting for a signal that
// arrived: a park that waits for a signal's uncommitted write reads the
// signal_seq it left and makes the job available; a signal that waits for
// a park's uncommitted move finds the job waiting, and wakes it.
func TestParkMeetsAConcurrentSignal(t *testing.T) {
	t.Parallel()
	for _, signalFirst := range []bool{true, false} {
		t.Run(map[bool]string{true: "SignalFirst", false: "ParkFirst"}[signalFirst], func(t *testing.T) {
			t.Parallel()
			s, _ := openStore(t)
			ctx := t.Context()
			res, err := s.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{
				{Kind: "wait.v1", Queue: "default", MaxAttempts: 3}}})
			if err != nil {
				t.Fatal(err)
			}
			id := res.Jobs[0].Job.ID
			now := time.Now()
			f, err := s.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "default", Kinds: []string{"wait.v1"}, Limit: 1,
				Node: "n", Now: now, LeaseUntil: now.Add(time.Minute)})
			if err != nil || len(f.Jobs) != 1 {
				t.Fatalf("fetch: %+v, %v", f, err)
			}
			j := f.Jobs[0]
			park := &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{ID: id, Epoch: j.Epoch,
				State: twicetype.JobStateWaiting, WaitName: "approve", SignalSeq: j.SignalSeq, RefundAttempt: true}}}
			signal := &twicestore.JobSignalParams{JobID: id, Name: "approve", Payload: []byte(`1`)}

			tx, err := s.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
			type outcome struct {
				woke bool
				err  error
			}
			second := make(chan outcome, 1)
			if signalFirst {
				if _, err := tx.JobSignal(ctx, signal); err != nil {
					t.Fatal(err)
				}
				go func() {
					fin, err := s.JobFinish(ctx, park)
					second <- outcome{woke: err == nil && fin.Applied[0], err: err}
				}()
			} else {
				if fin, err := tx.JobFinish(ctx, park); err != nil || !fin.Applied[0] {
					t.Fatalf("park in the transaction: %+v, %v", fin, err)
				}
				go func() {
					r, err := s.JobSignal(ctx, signal)
					second <- outcome{woke: err == nil && r.Woke, err: err}
				}()
			}
			select {
			case o := <-second:
				t.Fatalf("the second write did not wait for the first's transaction: %+v", o)
			case <-time.After(200 * time.Millisecond):
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			o := <-second
			if o.err != nil || !o.woke {
				t.Fatalf("the second write: %+v; want it applied (the park) or waking the job (the signal)", o)
			}
			got, err := s.JobGet(ctx, &twicestore.JobGetParams{ID: id})
			if err != nil {
				t.Fatal(err)
			}
			if got.State != twicetype.JobStateAvailable || got.SignalSeq != 1 {
				t.Errorf("job after the race: state %s, seq %d; want available, 1", got.State, got.SignalSeq)
			}
		})
	}
}

// TestWorkflowCancelTakesAWaitingJob: cancelling a workflow cancels its
// waiting job at once, as an available one.
func TestWorkflowCancelTakesAWaitingJob(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	ctx := t.Context()
	w, err := s.WorkflowInsert(ctx, &twicestore.WorkflowInsertParams{Name: "wf", Tasks: []*twicestore.WorkflowTaskParams{
		{Name: "a", Job: &twicestore.JobInsertParams{Kind: "wait.v1", Queue: "default", MaxAttempts: 3}}}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	f, err := s.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "default", Kinds: []string{"wait.v1"}, Limit: 1,
		Node: "n", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || len(f.Jobs) != 1 {
		t.Fatalf("fetch: %+v, %v", f, err)
	}
	j := f.Jobs[0]
	if _, err := s.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{ID: j.ID, Epoch: j.Epoch,
		State: twicetype.JobStateWaiting, WaitName: "go", RefundAttempt: true}}}); err != nil {
		t.Fatal(err)
	}
	res, err := s.WorkflowCancel(ctx, &twicestore.WorkflowCancelParams{ID: w.Workflow.ID, By: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Jobs == nil || len(res.Jobs.Results) != 1 || res.Jobs.Results[0].State != twicetype.JobStateCancelled {
		t.Fatalf("WorkflowCancel's jobs = %+v, want the waiting job cancelled", res.Jobs)
	}
	got, err := s.JobGet(ctx, &twicestore.JobGetParams{ID: j.ID})
	if err != nil || got.State != twicetype.JobStateCancelled {
		t.Fatalf("the waiting job after WorkflowCancel: %+v, %v; want cancelled", got, err)
	}
}
