package twicemysql

// Queues as a whole: pause and resume them, list them, and find the ones no
// live node works.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
)

// nodeQueuesSQL lists the queues of the nodes' JSON arrays, a row per
// queue and node n. JSON_TABLE (MySQL 8.0.4+, MariaDB 10.6+) stands for
// SQLite's json_each; its text is cast to binary, so it compares with the
// VARBINARY queue columns byte by byte, as they compare with each other.
const nodeQueuesSQL = `JSON_TABLE(n.queues, '$[*]' COLUMNS (queue VARCHAR(1024) CHARACTER SET utf8mb4 PATH '$')) AS k`

// QueuePause stores the queue's pause, replacing the one stored for it.
// The new values are bound twice (see NodeHeartbeat).
func (e *executor) QueuePause(ctx context.Context, p *twicestore.QueuePauseParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	fields := []any{dbTime(nowOr(p.Now)), nullTime(p.Until), p.By, p.Reason}
	_, err := e.db.ExecContext(ctx, `INSERT INTO twice_queue_pauses (queue, paused_at, until, paused_by, reason)
		VALUES (?, ?, ?, ?, ?)
		ON DUPLICATE KEY UPDATE paused_at = ?, until = ?, paused_by = ?, reason = ?`,
		slices.Concat([]any{p.Queue}, fields, fields)...)
	if err != nil {
		return fmt.Errorf("pause queue %q: %w", p.Queue, mapError(err))
	}
	return nil
}

// QueueResume deletes the queue's pause; Resumed tells whether it was in
// force at Now. With no RETURNING in MySQL, the pause is read under a row
// lock and then deleted, in one transaction.
func (e *executor) QueueResume(ctx context.Context, p *twicestore.QueueResumeParams) (*twicestore.QueueResumeResult, error) {
	res := &twicestore.QueueResumeResult{}
	err := e.inTx(ctx, func(q dbtx) error {
		var until sql.NullTime
		err := q.QueryRowContext(ctx, `SELECT until FROM twice_queue_pauses WHERE queue = ? FOR UPDATE`, p.Queue).Scan(&until)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := q.ExecContext(ctx, `DELETE FROM twice_queue_pauses WHERE queue = ?`, p.Queue); err != nil {
			return err
		}
		res.Resumed = !until.Valid || until.Time.After(dbTime(nowOr(p.Now)))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("resume queue %q: %w", p.Queue, err)
	}
	return res, nil
}

// queueListSQL is QueueList's query; its three parameters are the time
// that tells due jobs from scheduled ones and pauses in force from ended
// ones. Counting reads only available and running jobs, never the
// finished history.
const queueListSQL = `WITH counts AS (
	SELECT queue,
		COUNT(CASE WHEN state = 'available' AND run_at <= ? THEN 1 END) AS due,
		COUNT(CASE WHEN state = 'available' AND run_at > ? THEN 1 END) AS scheduled,
		COUNT(CASE WHEN state = 'running' THEN 1 END) AS running
	FROM twice_jobs WHERE state IN ('available', 'running') GROUP BY queue
), names AS (
	SELECT queue FROM counts
	UNION SELECT queue FROM twice_queue_pauses
	UNION SELECT CAST(k.queue AS BINARY) FROM twice_nodes AS n, ` + nodeQueuesSQL + `
)
SELECT nm.queue, COALESCE(c.due, 0), COALESCE(c.scheduled, 0), COALESCE(c.running, 0),
	qp.queue IS NOT NULL AND (qp.until IS NULL OR qp.until > ?),
	qp.paused_at, qp.until, COALESCE(qp.paused_by, ''), COALESCE(qp.reason, '')
FROM names AS nm
LEFT JOIN counts AS c ON c.queue = nm.queue
LEFT JOIN twice_queue_pauses AS qp ON qp.queue = nm.queue`

// QueueList lists the queues of unfinished jobs, pauses and nodes, by
// name's bytes (sorted here, whatever order the union comes back in).
func (e *executor) QueueList(ctx context.Context, p *twicestore.QueueListParams) (*twicestore.QueueListResult, error) {
	now := dbTime(nowOr(p.Now))
	rows, err := e.db.QueryContext(ctx, queueListSQL, now, now, now)
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	queues, err := driverkit.ReadQueues(rows, driverkit.NativeTimes)
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	return &twicestore.QueueListResult{Queues: queues}, nil
}

// QueueStranded lists the queues with available jobs that no node alive
// since AliveSince lists among the queues it works. It groups first, then
// looks for a node once per queue rather than once per job.
func (e *executor) QueueStranded(ctx context.Context, p *twicestore.QueueStrandedParams) (*twicestore.QueueStrandedResult, error) {
	rows, err := e.db.QueryContext(ctx, `SELECT g.queue, g.n, g.oldest FROM (
			SELECT queue, COUNT(*) AS n, MIN(created_at) AS oldest FROM twice_jobs
			WHERE state = 'available' GROUP BY queue
		) AS g
		WHERE NOT EXISTS (
			SELECT 1 FROM twice_nodes AS n, `+nodeQueuesSQL+`
			WHERE n.heartbeat_at >= ? AND CAST(k.queue AS BINARY) = g.queue
		)`, dbTime(p.AliveSince))
	if err != nil {
		return nil, fmt.Errorf("find stranded queues: %w", err)
	}
	queues, err := driverkit.ReadStranded(rows, driverkit.NativeTimes)
	if err != nil {
		return nil, fmt.Errorf("find stranded queues: %w", err)
	}
	return &twicestore.QueueStrandedResult{Queues: queues}, nil
}
