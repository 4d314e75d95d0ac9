package twicepg

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// TestBatchCountersNoDeadlock finishes, concurrently, jobs of two batches
// whose ids interleave, in two completion statements that reach the
// batches in opposite orders: one finishes most of X's jobs and then one
// of Y's, the other most of Y's and then one of X's. The counter updates
// the batch trigger makes per row used to lock X then Y in one statement
// and Y then X in the other ("deadlock detected"); the counters are now
// updated in batch id order at the end of each statement.
func TestBatchCountersNoDeadlock(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	ctx := t.Context()
	const rounds, k = 25, 20
	base := time.Now().UTC().Truncate(time.Microsecond)
	job := func(kind string) *twicestore.JobInsertParams {
		return &twicestore.JobInsertParams{Kind: kind, Queue: "default", Args: []byte(`{}`), MaxAttempts: 3,
			RunAt: base, CreatedAt: base}
	}
	for r := range rounds {
		kind := fmt.Sprintf("deadlock.member%d.v1", r)
		var batches [2]int64
		for i := range batches {
			b, err := s.BatchInsert(ctx, &twicestore.BatchInsertParams{Open: true, Callback: job("deadlock.callback.v1"),
				CreatedAt: base})
			if err != nil {
				t.Fatalf("BatchInsert: %v", err)
			}
			batches[i] = b.Batch.ID
		}
		// Jobs x0, y0, x1, y1, …, xk, yk: their ids interleave.
		batchOf := map[int64]int64{}
		for range k + 1 {
			for _, id := range batches {
				add, err := s.BatchAdd(ctx, &twicestore.BatchAddParams{ID: id,
					Jobs: []*twicestore.JobInsertParams{job(kind)}})
				if err != nil {
					t.Fatalf("BatchAdd: %v", err)
				}
				batchOf[add.Jobs[0].Job.ID] = id
			}
		}
		fetched, err := s.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "default", Kinds: []string{kind},
			Limit: 2 * (k + 1), Node: "node-a", Now: base, LeaseUntil: base.Add(time.Hour)})
		if err != nil || len(fetched.Jobs) != 2*(k+1) {
			t.Fatalf("fetched %d jobs, %v; want %d", len(fetched.Jobs), err, 2*(k+1))
		}
		byBatch := map[int64][]*twicetype.JobRow{}
		slices.SortFunc(fetched.Jobs, func(a, b *twicetype.JobRow) int { return cmp.Compare(a.ID, b.ID) })
		for _, j := range fetched.Jobs {
			byBatch[batchOf[j.ID]] = append(byBatch[batchOf[j.ID]], j)
		}
		xs, ys := byBatch[batches[0]], byBatch[batches[1]]
		sets := [][]*twicestore.JobOutcome{
			append(completed(base, xs[:k]...), completed(base, ys[k])...), // X first, then Y
			append(completed(base, ys[:k]...), completed(base, xs[k])...), // Y first, then X
		}
		finishConcurrently(t, s, r, sets...)
		for _, id := range batches {
			b, err := s.BatchGet(ctx, &twicestore.BatchGetParams{ID: id})
			if err != nil || b.Completed != k+1 || b.Pending != 0 {
				t.Fatalf("round %d: batch %d after the completions: %+v, %v; want %d completed", r, id, b, err, k+1)
			}
		}
	}
}

// completed is the outcome of each of js completing at at.
func completed(at time.Time, js ...*twicetype.JobRow) []*twicestore.JobOutcome {
	out := make([]*twicestore.JobOutcome, len(js))
	for i, j := range js {
		out[i] = &twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted, FinishedAt: at}
	}
	return out
}

// finishConcurrently writes each set of outcomes in a JobFinish of its own,
// all at once, and fails on any error.
func finishConcurrently(t *testing.T, s *Store, round int, sets ...[]*twicestore.JobOutcome) {
	t.Helper()
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  = make([]error, len(sets))
	)
	for i, set := range sets {
		wg.Go(func() {
			<-start
			_, errs[i] = s.JobFinish(t.Context(), &twicestore.JobFinishParams{Outcomes: set})
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("round %d: concurrent completions: %v", round, err)
		}
	}
}

// TestBatchAndWorkflowCountersNoDeadlock is TestBatchCountersNoDeadlock
// across a batch and a workflow: batch X's first jobs, then workflow W's
// root tasks' jobs, then one more of X's (added to the open batch later),
// so one statement finishing X's first jobs and one of W's reaches X then
// W, and one finishing W's others and X's late one reaches W then X.
func TestBatchAndWorkflowCountersNoDeadlock(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	ctx := t.Context()
	const rounds, k = 25, 20
	base := time.Now().UTC().Truncate(time.Microsecond)
	for r := range rounds {
		kind := fmt.Sprintf("deadlock.mixed%d.v1", r)
		job := func() *twicestore.JobInsertParams {
			return &twicestore.JobInsertParams{Kind: kind, Queue: "default", Args: []byte(`{}`), MaxAttempts: 3,
				RunAt: base, CreatedAt: base}
		}
		first := make([]*twicestore.JobInsertParams, k)
		for i := range first {
			first[i] = job()
		}
		cb := job()
		cb.Kind = "deadlock.callback.v1"
		b, err := s.BatchInsert(ctx, &twicestore.BatchInsertParams{Open: true, Callback: cb, Jobs: first, CreatedAt: base})
		if err != nil {
			t.Fatalf("BatchInsert: %v", err)
		}
		tasks := make([]*twicestore.WorkflowTaskParams, k)
		for i := range tasks {
			tasks[i] = &twicestore.WorkflowTaskParams{Name: fmt.Sprint("t", i), Job: job()}
		}
		w, err := s.WorkflowInsert(ctx, &twicestore.WorkflowInsertParams{Name: "mixed", Tasks: tasks, CreatedAt: base})
		if err != nil {
			t.Fatalf("WorkflowInsert: %v", err)
		}
		late, err := s.BatchAdd(ctx, &twicestore.BatchAddParams{ID: b.Batch.ID, Jobs: []*twicestore.JobInsertParams{job()}})
		if err != nil {
			t.Fatalf("BatchAdd: %v", err)
		}
		fetched, err := s.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "default", Kinds: []string{kind},
			Limit: 2*k + 1, Node: "node-a", Now: base, LeaseUntil: base.Add(time.Hour)})
		if err != nil || len(fetched.Jobs) != 2*k+1 {
			t.Fatalf("fetched %d jobs, %v; want %d", len(fetched.Jobs), err, 2*k+1)
		}
		slices.SortFunc(fetched.Jobs, func(a, b *twicetype.JobRow) int { return cmp.Compare(a.ID, b.ID) })
		xs, ws, xLate := fetched.Jobs[:k], fetched.Jobs[k:2*k], fetched.Jobs[2*k]
		if xLate.ID != late.Jobs[0].Job.ID || ws[0].ID != w.Jobs[0].ID {
			t.Fatalf("ids do not interleave as planned: batch %d..%d+%d, workflow from %d", xs[0].ID, xs[k-1].ID, xLate.ID, ws[0].ID)
		}
		finishConcurrently(t, s, r,
			append(completed(base, xs...), completed(base, ws[0])...),     // X, then W
			append(completed(base, ws[1:]...), completed(base, xLate)...), // W, then X
		)
		bb, err := s.BatchGet(ctx, &twicestore.BatchGetParams{ID: b.Batch.ID})
		if err != nil || bb.Completed != k+1 {
			t.Fatalf("round %d: batch after the completions: %+v, %v; want %d completed", r, bb, err, k+1)
		}
		wg, err := s.WorkflowGet(ctx, &twicestore.WorkflowGetParams{ID: w.Workflow.ID})
		if err != nil || wg.Workflow.Completed != k || wg.Workflow.State != twicetype.WorkflowCompleted {
			t.Fatalf("round %d: workflow after the completions: %+v, %v; want completed", r, wg.Workflow, err)
		}
	}
}

// TestWorkflowCancelNoDeadlock: a completion holds a workflow job's row
// (as a completion statement does before it applies the workflow's
// counters at its end) while WorkflowCancel runs, and then finishes the
// job. WorkflowCancel used to lock the workflow row first and then wait
// for the job's, while the completion waited for the workflow row:
// "deadlock detected". It now locks the workflow's jobs, in id order,
// before the workflow, as completions do.
func TestWorkflowCancelNoDeadlock(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	ctx := t.Context()
	base := time.Now().UTC().Truncate(time.Microsecond)
	job := func() *twicestore.JobInsertParams {
		return &twicestore.JobInsertParams{Kind: "cancel.deadlock.v1", Queue: "default", Args: []byte(`{}`), MaxAttempts: 3,
			RunAt: base, CreatedAt: base}
	}
	w, err := s.WorkflowInsert(ctx, &twicestore.WorkflowInsertParams{Name: "cancelled", CreatedAt: base, Tasks: []*twicestore.WorkflowTaskParams{
		{Name: "a", Job: job()}, {Name: "b", Job: job()}, {Name: "after-a", Deps: []string{"a"}, Job: job()}}})
	if err != nil {
		t.Fatalf("WorkflowInsert: %v", err)
	}
	fetched, err := s.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "default", Kinds: []string{"cancel.deadlock.v1"},
		Limit: 10, Node: "node-a", Now: base, LeaseUntil: base.Add(time.Hour)})
	if err != nil || len(fetched.Jobs) != 2 {
		t.Fatalf("fetched %d jobs, %v; want the 2 root tasks' jobs", len(fetched.Jobs), err)
	}
	a := fetched.Jobs[0]
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	ptx := tx.Unwrap().(pgx.Tx)
	var pid int
	if err := ptx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := ptx.Exec(ctx, `SELECT 1 FROM twice_jobs WHERE id = $1 FOR UPDATE`, a.ID); err != nil {
		t.Fatal(err)
	}
	cancelled := make(chan error, 1)
	go func() {
		_, err := s.WorkflowCancel(ctx, &twicestore.WorkflowCancelParams{ID: w.Workflow.ID, Now: base})
		cancelled <- err
	}()
	waitfor.Cond(t, "WorkflowCancel to wait for the job's row", func() bool {
		var n int
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, pid).Scan(&n)
		return err == nil && n > 0
	}, nil)
	if _, err := tx.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: completed(base, a)}); err != nil {
		t.Fatalf("finishing the job while WorkflowCancel waits: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if err := waitfor.Recv(t, cancelled, "WorkflowCancel to return"); err != nil {
		t.Fatalf("WorkflowCancel: %v", err)
	}
	wg, err := s.WorkflowGet(ctx, &twicestore.WorkflowGetParams{ID: w.Workflow.ID})
	if err != nil || wg.Workflow.State != twicetype.WorkflowCancelled {
		t.Fatalf("workflow after the cancel: %+v, %v; want cancelled", wg.Workflow, err)
	}
}

// TestCountersOncePerStatement cancels, in one JobCancel, every job of an
// OnSuccess batch and of a workflow, and counts the updates of their rows
// the transaction made (pg_stat_xact_user_tables). 016's row triggers
// applied each job's move on its own: n updates of the batch's row and of
// the workflow's, after noting the moves in a setting each note copied
// whole (quadratic: 80 s for 20,000 batch jobs). The moves of a statement
// are now summed and applied once per batch and per workflow.
func TestCountersOncePerStatement(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t)
	ctx := t.Context()
	const n = 50
	base := time.Now().UTC().Truncate(time.Microsecond)
	job := func() *twicestore.JobInsertParams {
		return &twicestore.JobInsertParams{Kind: "counters.once.v1", Queue: "default", Args: []byte(`{}`), MaxAttempts: 3,
			RunAt: base, CreatedAt: base}
	}
	members := make([]*twicestore.JobInsertParams, n)
	tasks := make([]*twicestore.WorkflowTaskParams, n)
	for i := range n {
		members[i] = job()
		tasks[i] = &twicestore.WorkflowTaskParams{Name: fmt.Sprint("t", i), Job: job()}
	}
	tasks = append(tasks, &twicestore.WorkflowTaskParams{Name: "last", Deps: []string{"t0", "t1"}, Job: job()})
	b, err := s.BatchInsert(ctx, &twicestore.BatchInsertParams{OnSuccess: true, Callback: job(), Jobs: members, CreatedAt: base})
	if err != nil {
		t.Fatalf("BatchInsert: %v", err)
	}
	w, err := s.WorkflowInsert(ctx, &twicestore.WorkflowInsertParams{Name: "once", OnDead: twicetype.WorkflowOnDeadCancel,
		Tasks: tasks, CreatedAt: base})
	if err != nil {
		t.Fatalf("WorkflowInsert: %v", err)
	}
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	ptx := tx.Unwrap().(pgx.Tx)
	// The counts are read before and after, in the transaction: they may
	// include the connection's earlier transactions, not yet reported.
	before := tableUpdates(t, ptx)
	res, err := tx.JobCancel(ctx, &twicestore.JobCancelParams{Filter: twicestore.JobFilter{Kind: "counters.once.v1"}, Now: base})
	if err != nil {
		t.Fatalf("JobCancel: %v", err)
	}
	if len(res.IDs) != 2*n {
		t.Fatalf("JobCancel cancelled %d jobs; want %d", len(res.IDs), 2*n)
	}
	updates := tableUpdates(t, ptx)
	for table, c := range before {
		updates[table] -= c
	}
	if updates["twice_batches"] != 1 || updates["twice_workflows"] != 1 {
		t.Errorf("one JobCancel of %d batch jobs and %d workflow jobs updated the batch %d times and the workflow %d times; want once each",
			n, n, updates["twice_batches"], updates["twice_workflows"])
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	bb, err := s.BatchGet(ctx, &twicestore.BatchGetParams{ID: b.Batch.ID})
	if err != nil || bb.Cancelled != n || bb.Pending != 0 || bb.FinishedAt.IsZero() || bb.CallbackJobID != 0 {
		t.Errorf("batch after the cancel: %+v, %v; want %d cancelled, finished, no callback", bb, err, n)
	}
	wg, err := s.WorkflowGet(ctx, &twicestore.WorkflowGetParams{ID: w.Workflow.ID})
	if err != nil || wg.Workflow.Dead != n || wg.Workflow.State != twicetype.WorkflowFailed {
		t.Fatalf("workflow after the cancel: %+v, %v; want %d dead, failed", wg.Workflow, err, n)
	}
	for _, task := range wg.Tasks {
		if task.Name == "last" && task.State != twicetype.WorkflowTaskCancelled {
			t.Errorf("task downstream of the cancelled ones: %+v; want cancelled", task)
		}
	}
}

// tableUpdates reads the row updates of twice_batches and twice_workflows
// the transaction has made, by table.
func tableUpdates(t *testing.T, tx pgx.Tx) map[string]int64 {
	t.Helper()
	updates := map[string]int64{}
	rs, err := tx.Query(t.Context(), `SELECT relname, n_tup_upd FROM pg_stat_xact_user_tables
		WHERE schemaname = current_schema() AND relname IN ('twice_batches', 'twice_workflows')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	for rs.Next() {
		var (
			table string
			n     int64
		)
		if err := rs.Scan(&table, &n); err != nil {
			t.Fatal(err)
		}
		updates[table] = n
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return updates
}
