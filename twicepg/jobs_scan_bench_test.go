package twicepg

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/twicejobs/twice/internal/testkit/pgtest"
)

// BenchmarkScanJobs scans a fetch-sized result, 1,000 running jobs as a
// fetch returns them: each_row with scanJob (as JobFetch does), scanner with
// one jobScanner for all rows (as queryJobs does); B/op and allocs/op are
// per 1,000 rows.
// It needs TWICE_TEST_POSTGRES.
func BenchmarkScanJobs(b *testing.B) {
	s, pool := openBenchStore(b, "bench_scan")
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO twice_jobs (kind, queue, args, message_id, idempotency_key,
			state, attempt, max_attempts, epoch, run_at, lease_until, attempted_by, created_at)
		SELECT 'bench.noop.v1', 'default', '{"run":1,"n":2}'::bytea, gen_random_uuid()::text, gen_random_uuid()::text,
			'running', 1, 20, 1, now(), now() + interval '1 hour', 'node-1', now()
		FROM generate_series(1, 1000)`); err != nil {
		b.Fatal(err)
	}
	query := `SELECT false, ` + jobColumns + ` FROM twice_jobs AS j ORDER BY id`
	for _, bc := range []struct {
		name string
		scan func(rs rows) error
	}{
		{"each_row", func(rs rows) error {
			for rs.Next() {
				var processed bool
				if _, err := scanJob(rs, &processed); err != nil {
					return err
				}
			}
			return rs.Err()
		}},
		{"scanner", func(rs rows) error {
			var processed bool
			sc := newJobScanner(&processed)
			for rs.Next() {
				if _, err := sc.scan(rs); err != nil {
					return err
				}
			}
			return rs.Err()
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				rs, err := s.q.query(ctx, query) //nolint:rowserrcheck // bc.scan checks Err
				if err != nil {
					b.Fatal(err)
				}
				err = bc.scan(rs)
				rs.Close()
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// openBenchStore opens a Store and a pool on a new schema named after
// prefix, both closed when b ends.
func openBenchStore(b *testing.B, prefix string) (*Store, *pgxpool.Pool) {
	url, _ := pgtest.Schema(b, prefix)
	ctx := context.Background()
	s, err := Open(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return s, pool
}
