package twicepg

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
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

// BenchmarkRetentionRoundNothingDue times a pruning round over
// TWICE_RETENTION_ROWS completed jobs (2,000,000 by default), none of
// which is old enough yet, the usual case: the bounded window (what
// JobDeleteFinished runs) against the unbounded search it replaced. Run
// with -benchtime 10x; it needs TWICE_TEST_POSTGRES.
func BenchmarkRetentionRoundNothingDue(b *testing.B) {
	rows := retentionRows(b, 2_000_000)
	s, pool := openBenchStore(b, "bench_retention")
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO twice_jobs (kind, queue, args, state, attempt, max_attempts, epoch, run_at, created_at, finished_at)
		SELECT 'bench.noop.v1', 'default', '{}'::bytea, 'completed', 1, 20, 1, now(), now(), now() - interval '1 hour'
		FROM generate_series(1, ` + fmt.Sprint(rows) + `)`,
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

// retentionRows is TWICE_RETENTION_ROWS, the completed jobs the retention
// benchmarks fill the table with, or def.
func retentionRows(b *testing.B, def int) int {
	v := os.Getenv("TWICE_RETENTION_ROWS")
	if v == "" {
		return def
	}
	var rows int
	if _, err := fmt.Sscan(v, &rows); err != nil || rows <= 0 {
		b.Fatalf("TWICE_RETENTION_ROWS=%q: want a count of rows", v)
	}
	return rows
}

// BenchmarkRetentionRoundsDue times the retention rounds that delete due
// jobs, 1,000 a round, over TWICE_RETENTION_ROWS completed jobs (2,000,000
// by default), in three phases of 200 rounds each, a VACUUM before each:
// with nothing holding the xmin horizon; then while another session holds
// a REPEATABLE READ snapshot open, each round started from the front of
// the state (as before a pass carried its cursor); then pinned again, each
// round given the cursor the round before returned, as the pruner does.
// It reports the median round of the first and of the last ten of each
// phase: a round whose cost grows with the rows deleted before it shows it
// in the last. Run with -benchtime 1x; it needs TWICE_TEST_POSTGRES.
func BenchmarkRetentionRoundsDue(b *testing.B) {
	const limit, rounds = 1000, 200
	phases := []struct {
		name           string
		pinned, cursor bool
	}{{"free", false, true}, {"pinned-front", true, false}, {"pinned-cursor", true, true}}
	rows := retentionRows(b, 2_000_000)
	due := len(phases) * limit * rounds
	if rows < due {
		b.Fatalf("TWICE_RETENTION_ROWS=%d: want at least %d rows, the ones the rounds delete", rows, due)
	}
	s, pool := openBenchStore(b, "bench_retention_due")
	ctx := context.Background()
	// The lowest ids finished two days ago and are due; the rest an hour
	// ago, and are not.
	fill := fmt.Sprintf(`INSERT INTO twice_jobs (kind, queue, args, state, attempt, max_attempts, epoch, run_at, created_at, finished_at)
		SELECT 'bench.noop.v1', 'default', '{}'::bytea, 'completed', 1, 20, 1, now(), now(),
			now() - CASE WHEN g <= %d THEN interval '2 days' ELSE interval '1 hour' END
		FROM generate_series(1, %d) AS g`, due, rows)
	for _, q := range []string{fill, `VACUUM ANALYZE twice_jobs`} {
		if _, err := pool.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	before := time.Now().Add(-24 * time.Hour)
	run := func(b *testing.B, name string, cursor bool) {
		took := make([]time.Duration, rounds)
		var after map[twicetype.JobState]int64
		for i := range rounds {
			t0 := time.Now()
			res, err := s.JobDeleteFinished(ctx, &twicestore.JobDeleteFinishedParams{CompletedBefore: before, Limit: limit, After: after})
			if err != nil || res.Deleted != limit {
				b.Fatalf("%s round %d: JobDeleteFinished = %+v, %v; want %d deleted", name, i, res, err, limit)
			}
			took[i] = time.Since(t0)
			if cursor {
				after = res.After
			}
		}
		med := func(d []time.Duration) float64 {
			d = slices.Clone(d)
			slices.Sort(d)
			return float64(d[len(d)/2]) / float64(time.Millisecond)
		}
		b.ReportMetric(med(took[:10]), name+"-first-ms")
		b.ReportMetric(med(took[rounds-10:]), name+"-last-ms")
	}
	b.Run("rounds", func(b *testing.B) {
		for b.Loop() {
			for _, ph := range phases {
				if _, err := pool.Exec(ctx, `VACUUM twice_jobs`); err != nil {
					b.Fatal(err)
				}
				if !ph.pinned {
					run(b, ph.name, ph.cursor)
					continue
				}
				pin, err := pool.Acquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				for _, q := range []string{`BEGIN ISOLATION LEVEL REPEATABLE READ`, `SELECT count(*) FROM twice_nodes`} {
					if _, err := pin.Exec(ctx, q); err != nil {
						b.Fatal(err)
					}
				}
				run(b, ph.name, ph.cursor)
				if _, err := pin.Exec(ctx, `ROLLBACK`); err != nil {
					b.Fatal(err)
				}
				pin.Release()
			}
			b.ReportMetric(0, "ns/op")
		}
	})
}
