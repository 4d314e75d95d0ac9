package twicepg

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/twicestore"
)

// unboundedDeleteFinishedSQL is the retention batch before the window: it
// searched every row of the state for one old enough. Kept here only to
// show what the window saves.
const unboundedDeleteFinishedSQL = `DELETE FROM twice_jobs WHERE id IN (
	SELECT id FROM twice_jobs
	WHERE state = $1 AND finished_at < $2
	ORDER BY id
	LIMIT $3
	FOR UPDATE SKIP LOCKED
)`

// BenchmarkRetentionRoundNothingDue times a pruning round over 2,000,000
// completed jobs, none of which is old enough yet, the usual case: the
// bounded window (what JobDeleteFinished runs) against the unbounded search
// it replaced. Run with -benchtime 10x; it needs TWICE_TEST_POSTGRES.
func BenchmarkRetentionRoundNothingDue(b *testing.B) {
	url, _ := pgtest.Schema(b, "bench_retention")
	ctx := context.Background()
	s, err := Open(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	for _, q := range []string{
		`INSERT INTO twice_jobs (kind, queue, args, state, attempt, max_attempts, epoch, run_at, created_at, finished_at)
		SELECT 'bench.noop.v1', 'default', '{}'::bytea, 'completed', 1, 20, 1, now(), now(), now() - interval '1 hour'
		FROM generate_series(1, 2000000)`,
		`VACUUM ANALYZE twice_jobs`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	const limit = 1000
	before := time.Now().Add(-24 * time.Hour)
	b.Run("window", func(b *testing.B) {
		for b.Loop() {
			res, err := s.JobDeleteFinished(ctx, &twicestore.JobDeleteFinishedParams{CompletedBefore: before, Limit: limit})
			if err != nil || res.Deleted != 0 {
				b.Fatalf("JobDeleteFinished = %+v, %v", res, err)
			}
		}
	})
	b.Run("unbounded", func(b *testing.B) {
		for b.Loop() {
			if _, err := pool.Exec(ctx, unboundedDeleteFinishedSQL, "completed", before, limit); err != nil {
				b.Fatal(err)
			}
		}
	})
}
