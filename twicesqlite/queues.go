package twicesqlite

// Queues as a whole: pause and resume them, list them, and find the ones no
// live node works.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
)

// QueuePause stores the queue's pause, replacing the one stored for it.
func (e *executor) QueuePause(ctx context.Context, p *twicestore.QueuePauseParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	var until any
	if !p.Until.IsZero() {
		until = micros(p.Until)
	}
	err := e.write(ctx, func() error {
		_, err := e.db.ExecContext(ctx, `INSERT INTO twice_queue_pauses (queue, paused_at, until, paused_by, reason)
			VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (queue) DO UPDATE SET paused_at = excluded.paused_at, until = excluded.until,
				paused_by = excluded.paused_by, reason = excluded.reason`,
			p.Queue, micros(nowOr(p.Now)), until, p.By, p.Reason)
		return err
	})
	if err != nil {
		return fmt.Errorf("pause queue %q: %w", p.Queue, err)
	}
	return nil
}

// QueueResume deletes the queue's pause; Resumed tells whether it was in
// force at Now.
func (e *executor) QueueResume(ctx context.Context, p *twicestore.QueueResumeParams) (*twicestore.QueueResumeResult, error) {
	res := &twicestore.QueueResumeResult{}
	err := e.write(ctx, func() error {
		var until sql.NullInt64
		err := e.db.QueryRowContext(ctx, `DELETE FROM twice_queue_pauses WHERE queue = ? RETURNING until`, p.Queue).Scan(&until)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		res.Resumed = err == nil && (!until.Valid || until.Int64 > micros(nowOr(p.Now)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("resume queue %q: %w", p.Queue, err)
	}
	return res, nil
}

// QueueList lists the queues of unfinished jobs, pauses and nodes, by name.
func (e *executor) QueueList(ctx context.Context, p *twicestore.QueueListParams) (*twicestore.QueueListResult, error) {
	now := micros(nowOr(p.Now))
	rows, err := e.db.QueryContext(ctx, `WITH counts AS (
			SELECT queue,
				SUM(state = 'available' AND run_at <= ?1) AS due,
				SUM(state = 'available' AND run_at > ?1) AS scheduled,
				SUM(state = 'running') AS running
			FROM twice_jobs WHERE state IN ('available', 'running') GROUP BY queue
		), names AS (
			SELECT queue FROM counts
			UNION SELECT queue FROM twice_queue_pauses
			UNION SELECT k.value FROM twice_nodes AS n, json_each(n.queues) AS k
		)
		SELECT n.queue, COALESCE(c.due, 0), COALESCE(c.scheduled, 0), COALESCE(c.running, 0),
			qp.paused_at IS NOT NULL AND (qp.until IS NULL OR qp.until > ?1),
			qp.paused_at, qp.until, COALESCE(qp.paused_by, ''), COALESCE(qp.reason, '')
		FROM names AS n
		LEFT JOIN counts AS c ON c.queue = n.queue
		LEFT JOIN twice_queue_pauses AS qp ON qp.queue = n.queue`, now)
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	queues, err := driverkit.ReadQueues(rows, driverkit.MicrosTimes)
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	return &twicestore.QueueListResult{Queues: queues}, nil
}

// QueueStranded lists the queues with available jobs that no node alive
// since AliveSince lists among the queues it works.
func (e *executor) QueueStranded(ctx context.Context, p *twicestore.QueueStrandedParams) (*twicestore.QueueStrandedResult, error) {
	rows, err := e.db.QueryContext(ctx, `SELECT g.queue, g.n, g.oldest FROM (
			SELECT queue, COUNT(*) AS n, MIN(created_at) AS oldest FROM twice_jobs
			WHERE state = 'available' GROUP BY queue
		) AS g
		WHERE NOT EXISTS (
			SELECT 1 FROM twice_nodes AS n, json_each(n.queues) AS k
			WHERE n.heartbeat_at >= ? AND k.value = g.queue
		)`, micros(p.AliveSince))
	if err != nil {
		return nil, fmt.Errorf("find stranded queues: %w", err)
	}
	queues, err := driverkit.ReadStranded(rows, driverkit.MicrosTimes)
	if err != nil {
		return nil, fmt.Errorf("find stranded queues: %w", err)
	}
	return &twicestore.QueueStrandedResult{Queues: queues}, nil
}
