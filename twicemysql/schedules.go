package twicemysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
)

// ScheduleTick records the tick and inserts its job in one transaction: the
// executor's own when it runs in one, otherwise one begun for the tick.
//
// Several schedulers may record the same tick at once; exactly one fires
// it. The schedule's row is locked first (lockOrInsert: a first tick
// inserts it, and a concurrent first tick waits on that insert), and the
// tick fires only when the stored tick is earlier, read under the lock. A
// loser that waited reads the winner's committed tick and does nothing; if
// the winner rolls back, a waiting one takes the tick instead.
//
// The job goes through JobInsertMany's insert (insertJobs), in this
// transaction: when an unfinished job of its kind holds its unique key,
// nothing is inserted, and that job is returned and recorded as the
// tick's.
func (e *executor) ScheduleTick(ctx context.Context, p *twicestore.ScheduleTickParams) (*twicestore.ScheduleTickResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	tick, now := dbTime(p.TickAt), dbTime(nowOr(p.Now))
	res := &twicestore.ScheduleTickResult{}
	err := e.inTx(ctx, func(q dbtx) error {
		var last time.Time
		lock := func() (bool, error) {
			err := q.QueryRowContext(ctx, `SELECT last_tick_at FROM twice_schedules WHERE name = ? FOR UPDATE`,
				p.Name).Scan(&last)
			if errors.Is(err, sql.ErrNoRows) {
				return false, nil
			}
			return err == nil, err
		}
		found, err := lockOrInsert(lock, func() error {
			_, err := q.ExecContext(ctx, `INSERT INTO twice_schedules
				(name, kind, spec, last_tick_at, last_outcome, last_job_id, next_at, updated_at)
				VALUES (?, ?, ?, ?, ?, 0, ?, ?)`, p.Name, p.Kind, p.Spec, tick, p.Outcome, nullTime(p.NextAt), now)
			return err
		})
		if err != nil {
			return err
		}
		if found {
			if !last.Before(tick) {
				return nil // this tick or a later one is recorded: another scheduler fired it
			}
			if _, err := q.ExecContext(ctx, `UPDATE twice_schedules SET kind = ?, spec = ?, last_tick_at = ?,
				last_outcome = ?, last_job_id = 0, next_at = ?, updated_at = ? WHERE name = ?`,
				p.Kind, p.Spec, tick, p.Outcome, nullTime(p.NextAt), now, p.Name); err != nil {
				return err
			}
		}
		res.Fired = true
		var jobID int64
		if p.Job != nil {
			ins, err := insertJobs(ctx, q, []*twicestore.JobInsertParams{p.Job})
			if err != nil {
				return fmt.Errorf("insert job: %w", err)
			}
			res.Job = ins[0].Job
			jobID = res.Job.ID
			if _, err := q.ExecContext(ctx, `UPDATE twice_schedules SET last_job_id = ? WHERE name = ?`,
				jobID, p.Name); err != nil {
				return err
			}
		}
		return recordTick(ctx, q, p.Name, tick, p.Outcome, jobID, now)
	})
	if err != nil {
		return nil, fmt.Errorf("tick schedule %q: %w", p.Name, err)
	}
	return res, nil
}

// recordTick adds a fired tick to the schedule's history and deletes the
// ticks beyond the newest ScheduleTicksKept. The oldest tick kept is read
// first: MySQL refuses a DELETE whose subquery reads the table it deletes
// from (error 1093).
func recordTick(ctx context.Context, q dbtx, name string, tick time.Time, outcome string,
	jobID int64, now time.Time) error {
	// ON DUPLICATE KEY UPDATE with no change is "do nothing" on a tick
	// already recorded; INSERT IGNORE would also let a bad value through
	// as a warning.
	if _, err := q.ExecContext(ctx, `INSERT INTO twice_schedule_ticks (name, tick_at, outcome, job_id, recorded_at)
		VALUES (?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE name = name`,
		name, tick, outcome, jobID, now); err != nil {
		return fmt.Errorf("record tick: %w", err)
	}
	var oldestKept time.Time
	err := q.QueryRowContext(ctx, `SELECT tick_at FROM twice_schedule_ticks WHERE name = ?
		ORDER BY tick_at DESC LIMIT 1 OFFSET ?`, name, twicestore.ScheduleTicksKept-1).Scan(&oldestKept)
	if errors.Is(err, sql.ErrNoRows) {
		return nil // no more than ScheduleTicksKept ticks
	}
	if err == nil {
		_, err = q.ExecContext(ctx, `DELETE FROM twice_schedule_ticks WHERE name = ? AND tick_at < ?`, name, oldestKept)
	}
	if err != nil {
		return fmt.Errorf("prune ticks: %w", err)
	}
	return nil
}

// ScheduleTicks lists a schedule's kept ticks, newest first.
func (e *executor) ScheduleTicks(ctx context.Context, p *twicestore.ScheduleTicksParams) (*twicestore.ScheduleTicksResult, error) {
	rows, err := e.db.QueryContext(ctx, `SELECT tick_at, outcome, job_id, recorded_at FROM twice_schedule_ticks
		WHERE name = ? ORDER BY tick_at DESC`+limitClause(p.Limit), p.Name)
	if err != nil {
		return nil, fmt.Errorf("list ticks of %q: %w", p.Name, err)
	}
	ticks, err := dbrows.Collect(rows, driverkit.ScheduleTickRow(driverkit.NativeTimes, p.Name))
	if err != nil {
		return nil, fmt.Errorf("list ticks of %q: %w", p.Name, err)
	}
	return &twicestore.ScheduleTicksResult{Ticks: ticks}, nil
}

// ScheduleList lists the recorded schedules ordered by name, byte by byte
// (the column is VARBINARY).
func (e *executor) ScheduleList(ctx context.Context, _ *twicestore.ScheduleListParams) (*twicestore.ScheduleListResult, error) {
	rows, err := e.db.QueryContext(ctx, `SELECT name, kind, spec, last_tick_at, last_outcome, last_job_id,
		next_at, updated_at FROM twice_schedules ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	schedules, err := driverkit.CollectList(rows, driverkit.ScheduleRow(driverkit.NativeTimes))
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	return &twicestore.ScheduleListResult{Schedules: schedules}, nil
}

// ScheduleRemove deletes the schedule and its ticks in one transaction.
// The jobs its ticks enqueued stay.
func (e *executor) ScheduleRemove(ctx context.Context, p *twicestore.ScheduleRemoveParams) error {
	err := e.inTx(ctx, func(q dbtx) error {
		r, err := q.ExecContext(ctx, `DELETE FROM twice_schedules WHERE name = ?`, p.Name)
		if err != nil {
			return err
		}
		n, err := r.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			return twicestore.ErrNotFound
		}
		_, err = q.ExecContext(ctx, `DELETE FROM twice_schedule_ticks WHERE name = ?`, p.Name)
		return err
	})
	if err != nil {
		return fmt.Errorf("remove schedule %q: %w", p.Name, err)
	}
	return nil
}
