package twicepg

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
)

// tickSQL records a tick unless the schedule's stored tick is the same or
// later: the WHERE of DO UPDATE leaves the row alone, and affects no row,
// when another scheduler got there first.
//
// Concurrent ticks serialise on the row: an upsert that meets a row another
// transaction inserted or updated waits for that transaction, then
// re-evaluates the WHERE against the committed row (READ COMMITTED), so of
// several schedulers recording one tick exactly one affects the row; if the
// winner rolls back, a waiting one takes the tick instead. The job id is
// filled in after the job is inserted, under the row lock the upsert holds.
const tickSQL = `INSERT INTO twice_schedules AS s
	(name, kind, spec, last_tick_at, last_outcome, last_job_id, next_at, updated_at)
VALUES ($1, $2, $3, $4, $5, 0, $6, $7)
ON CONFLICT (name) DO UPDATE SET kind = excluded.kind, spec = excluded.spec,
	last_tick_at = excluded.last_tick_at, last_outcome = excluded.last_outcome,
	last_job_id = 0, next_at = excluded.next_at, updated_at = excluded.updated_at
WHERE s.last_tick_at < excluded.last_tick_at`

// ScheduleTick records the tick and inserts its job in one transaction: the
// executor's own when it runs in one, otherwise one begun for the tick.
//
// The job goes through JobInsertMany's insert: when an unfinished job of
// its kind holds its unique key, nothing is inserted, and that job is
// returned and recorded as the tick's. The insert notifies the job's queue
// as JobInsertMany does, on commit.
func (e *executor) ScheduleTick(ctx context.Context, p *twicestore.ScheduleTickParams) (*twicestore.ScheduleTickResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	res := &twicestore.ScheduleTickResult{}
	err := e.inTx(ctx, func(tx *executor) error {
		var next sql.NullTime
		if !p.NextAt.IsZero() {
			next = sql.NullTime{Time: p.NextAt, Valid: true}
		}
		n, err := tx.q.exec(ctx, tickSQL, p.Name, p.Kind, p.Spec, p.TickAt, p.Outcome, next, nowOr(p.Now))
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		res.Fired = true
		var jobID int64
		if p.Job != nil {
			ins, err := tx.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{p.Job}})
			if err != nil {
				return err
			}
			res.Job = ins.Jobs[0].Job
			jobID = res.Job.ID
			if _, err := tx.q.exec(ctx, `UPDATE twice_schedules SET last_job_id = $2 WHERE name = $1`,
				p.Name, jobID); err != nil {
				return err
			}
		}
		// The tick's history: this tick, and no more than the newest
		// ScheduleTicksKept of the schedule.
		if _, err := tx.q.exec(ctx, `INSERT INTO twice_schedule_ticks (name, tick_at, outcome, job_id, recorded_at)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name, tick_at) DO NOTHING`,
			p.Name, p.TickAt, p.Outcome, jobID, nowOr(p.Now)); err != nil {
			return fmt.Errorf("record tick: %w", err)
		}
		if _, err := tx.q.exec(ctx, `DELETE FROM twice_schedule_ticks WHERE name = $1 AND tick_at < (
				SELECT tick_at FROM twice_schedule_ticks WHERE name = $1 ORDER BY tick_at DESC LIMIT 1 OFFSET $2)`,
			p.Name, twicestore.ScheduleTicksKept-1); err != nil {
			return fmt.Errorf("prune ticks: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("tick schedule %q: %w", p.Name, err)
	}
	return res, nil
}

// ScheduleTicks lists a schedule's kept ticks, newest first.
func (e *executor) ScheduleTicks(ctx context.Context, p *twicestore.ScheduleTicksParams) (*twicestore.ScheduleTicksResult, error) {
	var limit *int
	if p.Limit > 0 {
		limit = &p.Limit
	}
	rs, err := e.q.query(ctx, `SELECT tick_at, outcome, job_id, recorded_at FROM twice_schedule_ticks
		WHERE name = $1 ORDER BY tick_at DESC LIMIT $2`, p.Name, limit)
	if err != nil {
		return nil, fmt.Errorf("list ticks of %q: %w", p.Name, err)
	}
	ticks, err := dbrows.Collect(rs, driverkit.ScheduleTickRow(driverkit.NativeTimes, p.Name))
	if err != nil {
		return nil, fmt.Errorf("list ticks of %q: %w", p.Name, err)
	}
	return &twicestore.ScheduleTicksResult{Ticks: ticks}, nil
}

// ScheduleList lists the recorded schedules ordered by name. COLLATE "C"
// orders by bytes, as SQLite does (see ToggleList).
func (e *executor) ScheduleList(ctx context.Context, _ *twicestore.ScheduleListParams) (*twicestore.ScheduleListResult, error) {
	rs, err := e.q.query(ctx, `SELECT name, kind, spec, last_tick_at, last_outcome, last_job_id, next_at, updated_at
		FROM twice_schedules ORDER BY name COLLATE "C"`)
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	schedules, err := driverkit.CollectList(rs, driverkit.ScheduleRow(driverkit.NativeTimes))
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	return &twicestore.ScheduleListResult{Schedules: schedules}, nil
}

// inTx runs fn with an executor in one transaction: e itself when it runs in
// one (a transaction twice or the caller began, which fn joins), otherwise a
// transaction begun on e's pool or *sql.DB and committed when fn returns
// nil. A transaction of its own that meets a job moved to another
// partition (moved.go) is run again, fn included, up to movedTries times.
func (e *executor) inTx(ctx context.Context, fn func(tx *executor) error) error {
	for try := 1; ; try++ {
		err := e.inTxOnce(ctx, fn)
		if isMoved(err) && try < movedTries && ctx.Err() == nil && autocommitsQuerier(e.q) {
			continue
		}
		return err
	}
}

// autocommitsQuerier reports whether q runs each statement on its own (see
// autocommits), which is when inTx begins a transaction of its own.
func autocommitsQuerier(q querier) bool {
	switch c := q.(type) {
	case pgxQuerier:
		return autocommits(c.c)
	case sqlQuerier:
		return autocommits(c.c)
	}
	return false
}

func (e *executor) inTxOnce(ctx context.Context, fn func(tx *executor) error) error {
	var (
		q        querier
		commit   func() error
		rollback func()
	)
	// A rollback's error says nothing the first error does not; it runs
	// even when ctx is done, so the connection goes back clean.
	bg := context.WithoutCancel(ctx)
	switch c := e.q.(type) {
	case pgxQuerier:
		pool, ok := c.c.(*pgxpool.Pool)
		if !ok {
			return fn(e)
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		q = pgxQuerier{tx}
		commit = func() error { return tx.Commit(ctx) }
		rollback = func() { _ = tx.Rollback(bg) }
	case sqlQuerier:
		db, ok := c.c.(*sql.DB)
		if !ok {
			return fn(e)
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		q = sqlQuerier{tx}
		commit = tx.Commit
		rollback = func() { _ = tx.Rollback() }
	default:
		return fn(e)
	}
	if err := fn(&executor{q: q, notify: e.notify, floors: e.floors}); err != nil {
		rollback()
		return err
	}
	if err := commit(); err != nil {
		rollback()
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// ScheduleRemove deletes the schedule and its ticks in one statement.
func (e *executor) ScheduleRemove(ctx context.Context, p *twicestore.ScheduleRemoveParams) error {
	n, err := e.q.exec(ctx, `WITH ticks AS (DELETE FROM twice_schedule_ticks WHERE name = $1)
		DELETE FROM twice_schedules WHERE name = $1`, p.Name)
	if err != nil {
		return fmt.Errorf("remove schedule %q: %w", p.Name, err)
	}
	if n == 0 {
		return fmt.Errorf("remove schedule %q: %w", p.Name, twicestore.ErrNotFound)
	}
	return nil
}
