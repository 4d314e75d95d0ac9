package twicepg

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/twicejobs/twice/internal/pgtest"
	"github.com/twicejobs/twice/twicetype"
)

// scanJobEachRow is scanJob as it was before jobScanner: its destinations
// built, and escaping to the heap, for every row. Kept here only to show
// what the scanner saves.
func scanJobEachRow(r row, extra ...any) (*twicetype.JobRow, error) {
	var (
		j                      twicetype.JobRow
		state, errs, meta      string
		leaseUntil, finishedAt sql.NullTime
		cancelAt               sql.NullTime
		cancelBy, cancelReason string
	)
	dest := append(extra, &j.ID, &j.Kind, &j.Queue, &j.Priority, &j.Args, &j.MessageID, &j.Key, &j.CorrelationID,
		&j.UniqueKey, &state, &j.Attempt, &j.MaxAttempts, &j.Epoch, &j.RunAt, &leaseUntil, &j.AttemptedBy,
		&errs, &j.Note, &j.CreatedAt, &finishedAt, &meta, &cancelAt, &cancelBy, &cancelReason, &j.Snoozes)
	if err := r.Scan(dest...); err != nil {
		return nil, err
	}
	if cancelAt.Valid {
		j.Cancel = &twicetype.CancelRequest{At: fromNull(cancelAt), By: cancelBy, Reason: cancelReason}
	}
	j.State = twicetype.JobState(state)
	j.LeaseUntil, j.FinishedAt = fromNull(leaseUntil), fromNull(finishedAt)
	if errs != "" && errs != "[]" {
		if err := json.Unmarshal([]byte(errs), &j.Errors); err != nil {
			return nil, err
		}
	}
	return &j, nil
}

// BenchmarkScanJobs scans a fetch-sized result, 1,000 running jobs as a
// fetch returns them, per row (as before) and with one jobScanner (as
// JobFetch and queryJobs do now); B/op and allocs/op are per 1,000 rows.
// It needs TWICE_TEST_POSTGRES.
func BenchmarkScanJobs(b *testing.B) {
	url, _ := pgtest.Schema(b, "bench_scan")
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
				if _, err := scanJobEachRow(rs, &processed); err != nil {
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
				rs, err := s.q.query(ctx, query)
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
