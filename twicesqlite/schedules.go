package twicesqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// tickSQL records a tick unless the schedule's stored tick is the same or
// later: the WHERE of DO UPDATE leaves the row alone, and changes nothing,
// when another scheduler got there first. The job id is filled in after the
// job is inserted.
const tickSQL = `INSERT INTO twice_schedules
	(name, kind, spec, last_tick_at, last_outcome, last_job_id, next_at, updated_at)
VALUES (?, ?, ?, ?, ?, 0, ?, ?)
ON CONFLICT (name) DO UPDATE SET kind = excluded.kind, spec = excluded.spec,
	last_tick_at = excluded.last_tick_at, last_outcome = excluded.last_outcome,
	last_job_id = 0, next_at = excluded.next_at, updated_at = excluded.updated_at
WHERE twice_schedules.last_tick_at < excluded.last_tick_at`

// ScheduleTick records the tick and inserts its job in one transaction (the
// caller's, when the executor runs in one). SQLite has one writer at a time,
// and the transaction holds the write lock from its start, so concurrent
// ticks run one after the other and only the first of a tick fires.
//
// The job goes through JobInsertMany's insert: when an unfinished job of
// its kind holds its unique key, nothing is inserted, and that job is
// returned and recorded as the tick's.
func (e *executor) ScheduleTick(ctx context.Context, p *twicestore.ScheduleTickParams) (*twicestore.ScheduleTickResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	res := &twicestore.ScheduleTickResult{}
	err := e.inTx(ctx, func(q dbtx) error {
		var next sql.NullInt64
		if !p.NextAt.IsZero() {
			next = sql.NullInt64{Int64: micros(p.NextAt), Valid: true}
		}
		r, err := q.ExecContext(ctx, tickSQL, p.Name, p.Kind, p.Spec, micros(p.TickAt), p.Outcome,
			next, micros(nowOr(p.Now)))
		if err != nil {
			return err
		}
		n, err := r.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		res.Fired = true
		if p.Job != nil {
			out := make([]*twicestore.JobInsertResult, 1)
			if err := insertChunkOf(ctx, q, []*twicestore.JobInsertParams{p.Job}, out); err != nil {
				return fmt.Errorf("insert job: %w", err)
			}
			if _, err := q.ExecContext(ctx, `UPDATE twice_schedules SET last_job_id = ? WHERE name = ?`,
				out[0].Job.ID, p.Name); err != nil {
				return err
			}
			res.Job = out[0].Job
		}
		return recordTick(ctx, q, p, res.Job)
	})
	if err != nil {
		return nil, fmt.Errorf("tick schedule %q: %w", p.Name, err)
	}
	return res, nil
}

// recordTick adds a fired tick to the schedule's history and deletes the
// ticks beyond the newest ScheduleTicksKept.
func recordTick(ctx context.Context, q dbtx, p *twicestore.ScheduleTickParams, job *twicetype.JobRow) error {
	var jobID int64
	if job != nil {
		jobID = job.ID
	}
	if _, err := q.ExecContext(ctx, `INSERT INTO twice_schedule_ticks (name, tick_at, outcome, job_id, recorded_at)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT (name, tick_at) DO NOTHING`,
		p.Name, micros(p.TickAt), p.Outcome, jobID, micros(nowOr(p.Now))); err != nil {
		return fmt.Errorf("record tick: %w", err)
	}
	if _, err := q.ExecContext(ctx, `DELETE FROM twice_schedule_ticks WHERE name = ? AND tick_at < (
			SELECT tick_at FROM twice_schedule_ticks WHERE name = ? ORDER BY tick_at DESC LIMIT 1 OFFSET ?)`,
		p.Name, p.Name, twicestore.ScheduleTicksKept-1); err != nil {
		return fmt.Errorf("prune ticks: %w", err)
	}
	return nil
}

// ScheduleTicks lists a schedule's kept ticks, newest first.
func (e *executor) ScheduleTicks(ctx context.Context, p *twicestore.ScheduleTicksParams) (*twicestore.ScheduleTicksResult, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = -1
	}
	rows, err := e.db.QueryContext(ctx, `SELECT tick_at, outcome, job_id, recorded_at FROM twice_schedule_ticks
		WHERE name = ? ORDER BY tick_at DESC LIMIT ?`, p.Name, limit)
	if err != nil {
		return nil, fmt.Errorf("list ticks of %q: %w", p.Name, err)
	}
	ticks, err := dbrows.Collect(rows, driverkit.ScheduleTickRow(driverkit.MicrosTimes, p.Name))
	if err != nil {
		return nil, fmt.Errorf("list ticks of %q: %w", p.Name, err)
	}
	return &twicestore.ScheduleTicksResult{Ticks: ticks}, nil
}

// ScheduleList lists the recorded schedules ordered by name, byte by byte
// (the column's BINARY collation).
func (e *executor) ScheduleList(ctx context.Context, _ *twicestore.ScheduleListParams) (*twicestore.ScheduleListResult, error) {
	rows, err := e.db.QueryContext(ctx, `SELECT name, kind, spec, last_tick_at, last_outcome, last_job_id,
		next_at, updated_at FROM twice_schedules ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	schedules, err := driverkit.CollectList(rows, driverkit.ScheduleRow(driverkit.MicrosTimes))
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	return &twicestore.ScheduleListResult{Schedules: schedules}, nil
}

// ScheduleRemove deletes the schedule and its ticks in one transaction.
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
