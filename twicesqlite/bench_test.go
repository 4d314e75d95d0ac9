package twicesqlite

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// BenchmarkBurnDown measures the store's share of a burn-down: insert a
// backlog in batches, then fetch and complete it in batches, as the
// producer and completer do. Reported per job.
func BenchmarkBurnDown(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				burnDown(b, n)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/job")
		})
	}
}

func burnDown(b *testing.B, n int) {
	ctx := b.Context()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const kind = "bench.noop.v1"
	now := time.Now()
	batch := make([]*twicestore.JobInsertParams, 0, 1000)
	for i := range n {
		batch = append(batch, &twicestore.JobInsertParams{Kind: kind, Queue: "default", Priority: 1,
			Args: []byte(`{"i":1}`), MessageID: fmt.Sprint(i), Key: fmt.Sprint(i), MaxAttempts: 3, RunAt: now, CreatedAt: now})
		if len(batch) == cap(batch) || i == n-1 {
			if _, err := s.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: batch}); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	done := 0
	for done < n {
		res, err := s.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "default", Kinds: []string{kind}, Limit: 100,
			Node: "bench", Now: now, LeaseUntil: now.Add(time.Minute)})
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Jobs) == 0 {
			b.Fatalf("backlog empty after %d of %d jobs", done, n)
		}
		outcomes := make([]*twicestore.JobOutcome, len(res.Jobs))
		for i, j := range res.Jobs {
			outcomes[i] = &twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted, FinishedAt: now}
		}
		if _, err := s.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: outcomes}); err != nil {
			b.Fatal(err)
		}
		done += len(res.Jobs)
	}
}
