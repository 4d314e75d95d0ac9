package twicepg

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

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
		done := func(js ...*twicetype.JobRow) []*twicestore.JobOutcome {
			var out []*twicestore.JobOutcome
			for _, j := range js {
				out = append(out, &twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted,
					FinishedAt: base})
			}
			return out
		}
		sets := [][]*twicestore.JobOutcome{
			append(done(xs[:k]...), done(ys[k])...), // X first, then Y
			append(done(ys[:k]...), done(xs[k])...), // Y first, then X
		}
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			errs  = make([]error, len(sets))
		)
		for i, set := range sets {
			wg.Go(func() {
				<-start
				_, errs[i] = s.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: set})
			})
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("round %d: concurrent completions: %v", r, err)
			}
		}
		for _, id := range batches {
			b, err := s.BatchGet(ctx, &twicestore.BatchGetParams{ID: id})
			if err != nil || b.Completed != k+1 || b.Pending != 0 {
				t.Fatalf("round %d: batch %d after the completions: %+v, %v; want %d completed", r, id, b, err, k+1)
			}
		}
	}
}
