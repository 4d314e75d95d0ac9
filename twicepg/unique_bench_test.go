package twicepg

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// BenchmarkUniqueJobLife: the whole life of 100 unique jobs (each with a
// key of its own) per op: inserted in one call, enqueued again (all 100
// duplicates), fetched and completed. It prices how a key is held: the
// unique index of migration 014 until migration 022, the claims table
// since. Jobs without a key, for comparison, run the same steps but the
// duplicates (which they cannot have). ns/op is 100 jobs.
func BenchmarkUniqueJobLife(b *testing.B) {
	for _, keyed := range []bool{false, true} {
		b.Run(fmt.Sprintf("unique=%v", keyed), func(b *testing.B) {
			u, _ := pgtest.Schema(b, "bench_unique_life")
			s, err := Open(context.Background(), pgtest.WithParams(b, u, map[string]string{"pool_max_conns": "4"}))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			const n = 100
			round := 0
			for b.Loop() {
				round++
				jobs := make([]*twicestore.JobInsertParams, n)
				for i := range jobs {
					jobs[i] = &twicestore.JobInsertParams{Kind: "bench.unique.v1", Queue: "default",
						Args: []byte(`{"n":1}`), MaxAttempts: 3}
					if keyed {
						jobs[i].UniqueKey = fmt.Sprintf("k-%d-%d", round, i)
					}
				}
				if _, err := s.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: jobs}); err != nil {
					b.Fatal(err)
				}
				if keyed {
					res, err := s.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: jobs})
					if err != nil {
						b.Fatal(err)
					}
					for _, r := range res.Jobs {
						if !r.Duplicate {
							b.Fatalf("job %d with a held key was inserted again", r.Job.ID)
						}
					}
				}
				now := time.Now()
				fetched, err := s.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "default", Kinds: []string{"bench.unique.v1"}, Limit: n, Node: "bench",
					Now: now, LeaseUntil: now.Add(time.Minute)})
				if err != nil {
					b.Fatal(err)
				}
				if len(fetched.Jobs) != n {
					b.Fatalf("fetched %d jobs, want %d", len(fetched.Jobs), n)
				}
				outcomes := make([]*twicestore.JobOutcome, n)
				for i, j := range fetched.Jobs {
					outcomes[i] = &twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted, FinishedAt: now}
				}
				if _, err := s.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: outcomes}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
