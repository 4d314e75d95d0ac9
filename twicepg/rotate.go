package twicepg

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/twicejobs/twice/twicestore"
)

// The live partition of twice_jobs is split in two generations (migration
// 023), which new jobs enter in turn, 30 s each (migration 024). Every
// change of a job's state leaves a dead row version in its generation. The
// generation new jobs are not entering is emptied when its dead versions
// are many: its jobs move to the other generation in batches, then a short
// transaction locks it, moves any job that came in since, and truncates
// it. TRUNCATE removes the dead versions at once, which vacuum cannot do
// while another session (a long report, a session idle in a transaction)
// holds a snapshot from before they died. So the dead versions in the live
// partition stay bounded by what two generations' worth of jobs leave,
// however long such a snapshot is held.

const (
	// rotateMinDead is JobRotateParams.MinDead's default.
	rotateMinDead = 10_000
	// rotateBatch is how many jobs one statement moves.
	rotateBatch = 1000
	// rotateMaxLeft is how many jobs may be left in the generation for the
	// transaction that locks it: it moves them while fetches wait.
	rotateMaxLeft = 1000
	// rotateLockTimeout bounds the wait for the generation's lock. While
	// the truncating transaction waits, statements that read the live
	// partition queue behind it, so the wait is short; a generation still
	// in use is emptied by a later call.
	rotateLockTimeout = "50ms"
	// analyzeMinLive is how many live jobs the current generation holds
	// before its statistics are worth refreshing.
	analyzeMinLive = 1000
)

// rotateMoveSQL moves, in id order from $1, up to rotateBatch jobs of
// generation %[1]d to generation %[2]d, skipping those another
// transaction holds (an outcome being written moves its job out of the
// live partition anyway), and returns their ids. %[3]s says which jobs:
// rotateNotDue or rotateDue. The generations are literals so that the
// plan reads one partition.
const rotateMoveSQL = `UPDATE twice_jobs AS j SET gen = %[2]d
WHERE j.id = ANY(ARRAY(SELECT id FROM twice_jobs_live_%[1]d
		WHERE id > $1 AND %[3]s ORDER BY id LIMIT %[4]d FOR UPDATE SKIP LOCKED))
	AND j.state IN ('available', 'running') AND j.gen = %[1]d
RETURNING j.id`

// The jobs the rotation moves first are those no fetch is about to lease:
// moving a due job leaves a dead entry in the fetch index ahead of where
// every fetch starts reading, until the truncation. A due job leaves the
// generation when a fetch leases it (fetchLeaseSQL); only when many due
// jobs stay (a backlog, a paused queue, kinds no worker runs) are they
// moved too, just before the truncation.
const (
	rotateNotDue = `NOT (state = 'available' AND run_at <= $2)`
	rotateDue    = `state = 'available' AND run_at <= $2`
)

// JobRotate empties the generation new jobs are not entering, when its
// dead row versions are worth it (see twicestore.Rotator). First it
// refreshes the statistics of the generation new jobs enter when they
// count far fewer jobs than it holds (see analyzeCurrent).
func (s *Store) JobRotate(ctx context.Context, p *twicestore.JobRotateParams) (*twicestore.JobRotateResult, error) {
	var cur int
	if err := s.q.queryRow(ctx, `SELECT twice_jobs_gen()`).Scan(&cur); err != nil {
		return nil, fmt.Errorf("rotate jobs: %w", err)
	}
	other := 1 - cur
	res := &twicestore.JobRotateResult{Generation: other}
	analyzed, err := s.analyzeCurrent(ctx, cur)
	if err != nil {
		return nil, err
	}
	res.Analyzed = analyzed
	err = s.q.queryRow(ctx, `SELECT coalesce(sum(n_dead_tup), 0)::bigint, coalesce(sum(n_live_tup), 0)::bigint
		FROM pg_stat_user_tables WHERE relid = $1::regclass`, fmt.Sprintf("twice_jobs_live_%d", other)).Scan(&res.Dead, &res.Live)
	if err != nil {
		return nil, fmt.Errorf("rotate jobs: statistics of generation %d: %w", other, err)
	}
	minDead := p.MinDead
	if minDead <= 0 {
		minDead = rotateMinDead
	}
	if !p.Force && (res.Dead < minDead || res.Dead < 4*res.Live) {
		return res, nil
	}
	now := time.Now()
	if err := s.moveJobs(ctx, res, other, cur, rotateNotDue, now); err != nil {
		return nil, err
	}
	var left int
	err = s.q.queryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM (SELECT 1 FROM twice_jobs_live_%d LIMIT %d) AS l`,
		other, rotateMaxLeft+1)).Scan(&left)
	if err != nil {
		return nil, fmt.Errorf("rotate jobs: count generation %d: %w", other, err)
	}
	if left > rotateMaxLeft {
		if err := s.moveJobs(ctx, res, other, cur, rotateDue, now); err != nil {
			return nil, err
		}
	}
	err = s.inTx(ctx, func(tx *executor) error {
		if _, err := tx.q.exec(ctx, `SET LOCAL lock_timeout = '`+rotateLockTimeout+`'`); err != nil {
			return err
		}
		if _, err := tx.q.exec(ctx, fmt.Sprintf(`LOCK TABLE twice_jobs_live_%d IN ACCESS EXCLUSIVE MODE`, other)); err != nil {
			return err
		}
		// Nobody else reads or writes the generation now: what is left
		// came in since the batches (or was held by an outcome that has
		// ended), and moves here, all of it.
		n, err := tx.q.exec(ctx, fmt.Sprintf(`UPDATE twice_jobs SET gen = %[2]d
			WHERE state IN ('available', 'running') AND gen = %[1]d`, other, cur))
		if err != nil {
			return err
		}
		res.Moved += n
		_, err = tx.q.exec(ctx, fmt.Sprintf(`TRUNCATE twice_jobs_live_%d`, other))
		return err
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == sqlStateLockNotAvailable {
		return res, nil // in use: a later call empties it
	}
	if err != nil {
		return nil, fmt.Errorf("rotate jobs: empty generation %d: %w", other, err)
	}
	res.Emptied = true
	return res, nil
}

// moveJobs moves the jobs of generation from that which says (rotateDue or
// rotateNotDue, at now) to generation to, in batches, and counts them in
// res.Moved.
func (s *Store) moveJobs(ctx context.Context, res *twicestore.JobRotateResult, from, to int, which string, now time.Time) error {
	query := fmt.Sprintf(rotateMoveSQL, from, to, which, rotateBatch)
	var after int64
	for ctx.Err() == nil {
		ids, err := queryIDs(ctx, s.q, query, after, now)
		if err != nil {
			return fmt.Errorf("rotate jobs: move generation %d: %w", from, err)
		}
		res.Moved += int64(len(ids))
		if len(ids) < rotateBatch {
			return nil
		}
		after = slices.Max(ids)
	}
	return ctx.Err()
}

// analyzeCurrent refreshes the statistics of generation cur, which new
// jobs enter, when they count fewer than half the jobs it holds, and
// reports whether it did. A generation just truncated counts as empty
// until it is analysed, and so the plans made meanwhile, and kept by the
// pools' prepared statements, read it whole where an index would find a
// few rows; ANALYZE also makes those plans be made again. Autovacuum would
// do it in time, where it runs at all.
func (s *Store) analyzeCurrent(ctx context.Context, cur int) (bool, error) {
	table := fmt.Sprintf("twice_jobs_live_%d", cur)
	var counted, live float64
	err := s.q.queryRow(ctx, `SELECT c.reltuples::float8, coalesce(st.n_live_tup, 0)::float8
		FROM pg_class AS c LEFT JOIN pg_stat_user_tables AS st ON st.relid = c.oid
		WHERE c.oid = $1::regclass`, table).Scan(&counted, &live)
	if err != nil {
		return false, fmt.Errorf("rotate jobs: statistics of generation %d: %w", cur, err)
	}
	if live < analyzeMinLive || counted >= live/2 {
		return false, nil
	}
	if _, err := s.q.exec(ctx, `ANALYZE `+table); err != nil {
		return false, fmt.Errorf("rotate jobs: analyze generation %d: %w", cur, err)
	}
	return true, nil
}

var _ twicestore.Rotator = (*Store)(nil)
