package twicemysql

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// composeJob is a job of kind due at base.
func composeJob(kind string, base time.Time) *twicestore.JobInsertParams {
	return &twicestore.JobInsertParams{Kind: kind, Queue: "default", Args: []byte(`{}`), MaxAttempts: 3,
		RunAt: base, CreatedAt: base}
}

// fetchAll leases every due job of kind.
func fetchAll(t *testing.T, s *Store, kind string, base time.Time, n int) []*twicetype.JobRow {
	t.Helper()
	res, err := s.JobFetch(t.Context(), &twicestore.JobFetchParams{Queue: "default", Kinds: []string{kind},
		Limit: n, Node: "node-a", Now: base, LeaseUntil: base.Add(time.Hour)})
	if err != nil || len(res.Jobs) != n {
		t.Fatalf("fetch %s: %d jobs, %v; want %d", kind, len(res.Jobs), err, n)
	}
	return res.Jobs
}

// finishEach finishes each set of outcomes in a JobFinish of its own, all
// at once, and fails on any error or outcome not applied.
func finishEach(t *testing.T, s *Store, sets ...[]*twicestore.JobOutcome) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(sets))
	for _, set := range sets {
		wg.Go(func() {
			res, err := s.JobFinish(t.Context(), &twicestore.JobFinishParams{Outcomes: set})
			if err != nil {
				errs <- err
				return
			}
			for i, ok := range res.Applied {
				if !ok {
					errs <- fmt.Errorf("outcome of job %d not applied", set[i].ID)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func completedAt(at time.Time, jobs ...*twicetype.JobRow) []*twicestore.JobOutcome {
	out := make([]*twicestore.JobOutcome, len(jobs))
	for i, j := range jobs {
		out[i] = &twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted, FinishedAt: at}
	}
	return out
}

// TestSiblingsFinishedAtOnce completes the members of a batch, and the
// dependencies of a workflow task, each in a transaction of its own, all
// at once: the triggers' counter updates are ordered by the row locks of
// the batch and the task, so exactly one transaction leaves them due and
// inserts the callback, or the task's job, once.
func TestSiblingsFinishedAtOnce(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ctx := t.Context()
	base := time.Now().UTC().Truncate(time.Microsecond)
	const n = 16
	for round := range 3 {
		kind := fmt.Sprintf("siblings.member%d.v1", round)
		members := make([]*twicestore.JobInsertParams, n)
		for i := range members {
			members[i] = composeJob(kind, base)
		}
		b, err := s.BatchInsert(ctx, &twicestore.BatchInsertParams{Callback: composeJob("siblings.callback.v1", base),
			Jobs: members, CreatedAt: base})
		if err != nil {
			t.Fatal(err)
		}
		var sets [][]*twicestore.JobOutcome
		for _, j := range fetchAll(t, s, kind, base, n) {
			sets = append(sets, completedAt(base, j))
		}
		finishEach(t, s, sets...)
		got, err := s.BatchGet(ctx, &twicestore.BatchGetParams{ID: b.Batch.ID})
		if err != nil || got.Pending != 0 || got.Completed != n || got.CallbackJobID == 0 {
			t.Fatalf("round %d: batch after its members completed at once: %+v, %v", round, got, err)
		}
	}
	cbs, err := s.JobList(ctx, &twicestore.JobListParams{Filter: twicestore.JobFilter{Kind: "siblings.callback.v1"}, Limit: 100})
	if err != nil || len(cbs.Jobs) != 3 {
		t.Fatalf("callbacks: %d, %v; want one per batch, 3", len(cbs.Jobs), err)
	}

	for round := range 3 {
		kind := fmt.Sprintf("siblings.root%d.v1", round)
		var tasks []*twicestore.WorkflowTaskParams
		var roots []string
		for i := range n {
			name := fmt.Sprintf("r%02d", i)
			roots = append(roots, name)
			tasks = append(tasks, &twicestore.WorkflowTaskParams{Name: name, Job: composeJob(kind, base)})
		}
		tasks = append(tasks, &twicestore.WorkflowTaskParams{Name: "z", Deps: roots, Job: composeJob("siblings.join.v1", base)})
		wf, err := s.WorkflowInsert(ctx, &twicestore.WorkflowInsertParams{Name: "fan-in", Tasks: tasks, CreatedAt: base})
		if err != nil {
			t.Fatal(err)
		}
		var sets [][]*twicestore.JobOutcome
		for _, j := range fetchAll(t, s, kind, base, n) {
			sets = append(sets, completedAt(base, j))
		}
		finishEach(t, s, sets...)
		g, err := s.WorkflowGet(ctx, &twicestore.WorkflowGetParams{ID: wf.Workflow.ID})
		if err != nil || g.Workflow.Completed != n {
			t.Fatalf("round %d: workflow after its roots completed at once: %+v, %v", round, g.Workflow, err)
		}
		z := g.Tasks[len(g.Tasks)-1]
		if z.Name != "z" || z.Job == nil || z.Job.State != twicetype.JobStateAvailable || z.State != twicetype.WorkflowTaskEnqueued {
			t.Fatalf("round %d: join task after its dependencies completed at once: %+v", round, z)
		}
	}
	joins, err := s.JobList(ctx, &twicestore.JobListParams{Filter: twicestore.JobFilter{Kind: "siblings.join.v1"}, Limit: 100})
	if err != nil || len(joins.Jobs) != 3 {
		t.Fatalf("join jobs: %d, %v; want one per workflow, 3", len(joins.Jobs), err)
	}
}

// TestBatchCountersCrossed finishes, at once, jobs of two batches in two
// JobFinish calls that reach the batches in opposite orders (most of X's
// jobs then one of Y's, and the other way round). The triggers lock the
// batch rows in that order, so InnoDB may pick one transaction as a
// deadlock's victim; inTx runs it again, and both calls succeed with the
// counters and callbacks right.
func TestBatchCountersCrossed(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ctx := t.Context()
	base := time.Now().UTC().Truncate(time.Microsecond)
	const rounds, k = 10, 10
	for r := range rounds {
		kind := fmt.Sprintf("crossed.member%d.v1", r)
		var batches [2]int64
		for i := range batches {
			b, err := s.BatchInsert(ctx, &twicestore.BatchInsertParams{Open: true, Callback: composeJob("crossed.callback.v1", base),
				CreatedAt: base})
			if err != nil {
				t.Fatal(err)
			}
			batches[i] = b.Batch.ID
		}
		batchOf := map[int64]int64{}
		for range k + 1 {
			for _, id := range batches {
				add, err := s.BatchAdd(ctx, &twicestore.BatchAddParams{ID: id, Jobs: []*twicestore.JobInsertParams{composeJob(kind, base)}})
				if err != nil {
					t.Fatal(err)
				}
				batchOf[add.Jobs[0].Job.ID] = id
			}
		}
		for _, id := range batches {
			if _, err := s.BatchSeal(ctx, &twicestore.BatchSealParams{ID: id, Now: base}); err != nil {
				t.Fatal(err)
			}
		}
		byBatch := map[int64][]*twicetype.JobRow{}
		for _, j := range fetchAll(t, s, kind, base, 2*(k+1)) {
			byBatch[batchOf[j.ID]] = append(byBatch[batchOf[j.ID]], j)
		}
		xs, ys := byBatch[batches[0]], byBatch[batches[1]]
		finishEach(t, s, append(completedAt(base, xs[:k]...), completedAt(base, ys[k])...),
			append(completedAt(base, ys[:k]...), completedAt(base, xs[k])...))
		for _, id := range batches {
			b, err := s.BatchGet(ctx, &twicestore.BatchGetParams{ID: id})
			if err != nil || b.Completed != k+1 || b.Pending != 0 || b.CallbackJobID == 0 {
				t.Fatalf("round %d: batch %d: %+v, %v; want %d completed and its callback", r, id, b, err, k+1)
			}
		}
	}
}
