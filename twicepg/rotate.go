package twicepg

import (
	"context"
	"errors"
	"fmt"

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
	// rotateLockTimeout bounds the wait for the generation's lock. While
	// the truncating transaction waits, statements that read the live
	// partition queue behind it, so the wait is short; a generation still
	// in use is emptied by a later call.
	rotateLockTimeout = "50ms"
)

// rotateMoveSQL moves up to rotateBatch jobs of generation %[1]d to
// generation %[2]d, skipping those another transaction holds (an outcome
// being written moves its job out of the live partition anyway). The
// generations are literals so that the plan reads one partition.
const rotateMoveSQL = `UPDATE twice_jobs AS j SET gen = %[2]d
FROM (SELECT id FROM twice_jobs_live_%[1]d LIMIT %[3]d FOR UPDATE SKIP LOCKED) AS m
WHERE j.id = m.id AND j.state IN ('available', 'running') AND j.gen = %[1]d`

// JobRotate empties the generation new jobs are not entering, when its
// dead row versions are worth it (see twicestore.Rotator).
func (s *Store) JobRotate(ctx context.Context, p *twicestore.JobRotateParams) (*twicestore.JobRotateResult, error) {
	var cur int
	if err := s.q.queryRow(ctx, `SELECT twice_jobs_gen()`).Scan(&cur); err != nil {
		return nil, fmt.Errorf("rotate jobs: %w", err)
	}
	other := 1 - cur
	res := &twicestore.JobRotateResult{Generation: other}
	err := s.q.queryRow(ctx, `SELECT coalesce(sum(n_dead_tup), 0)::bigint, coalesce(sum(n_live_tup), 0)::bigint
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
	for ctx.Err() == nil {
		n, err := s.q.exec(ctx, fmt.Sprintf(rotateMoveSQL, other, cur, rotateBatch))
		if err != nil {
			return nil, fmt.Errorf("rotate jobs: move generation %d: %w", other, err)
		}
		res.Moved += n
		if n < rotateBatch {
			break
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

var _ twicestore.Rotator = (*Store)(nil)
