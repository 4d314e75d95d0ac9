package twicepg

// Queues as a whole: pause and resume them, list them, and find the ones no
// live node works.

import (
	"context"
	"fmt"

	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
)

// QueuePause stores the queue's pause, replacing the one stored for it.
func (e *executor) QueuePause(ctx context.Context, p *twicestore.QueuePauseParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	var until any // NULL: until resumed
	if !p.Until.IsZero() {
		until = p.Until
	}
	_, err := e.q.exec(ctx, `INSERT INTO twice_queue_pauses (queue, paused_at, until, paused_by, reason)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (queue) DO UPDATE SET paused_at = excluded.paused_at, until = excluded.until,
			paused_by = excluded.paused_by, reason = excluded.reason`,
		p.Queue, nowOr(p.Now), until, p.By, p.Reason)
	if err != nil {
		return fmt.Errorf("pause queue %q: %w", p.Queue, err)
	}
	return nil
}

// QueueResume deletes the queue's pause; Resumed tells whether it was in
// force at Now.
func (e *executor) QueueResume(ctx context.Context, p *twicestore.QueueResumeParams) (*twicestore.QueueResumeResult, error) {
	var resumed bool
	err := e.q.queryRow(ctx, `WITH gone AS (
			DELETE FROM twice_queue_pauses WHERE queue = $1 RETURNING until
		)
		SELECT EXISTS (SELECT 1 FROM gone WHERE until IS NULL OR until > $2)`, p.Queue, nowOr(p.Now)).Scan(&resumed)
	if err != nil {
		return nil, fmt.Errorf("resume queue %q: %w", p.Queue, err)
	}
	return &twicestore.QueueResumeResult{Resumed: resumed}, nil
}

// queueListSQL is QueueList's query; $1 is the time that tells due jobs
// from scheduled ones.
const queueListSQL = `WITH counts AS (
	SELECT queue,
		count(*) FILTER (WHERE state = 'available' AND run_at <= $1) AS due,
		count(*) FILTER (WHERE state = 'available' AND run_at > $1) AS scheduled,
		count(*) FILTER (WHERE state = 'running') AS running
	FROM twice_jobs WHERE state = 'available' OR state = 'running' GROUP BY queue
), names AS (
	SELECT queue FROM counts
	UNION SELECT queue FROM twice_queue_pauses
	UNION SELECT unnest(queues) FROM twice_nodes
)
SELECT n.queue, coalesce(c.due, 0), coalesce(c.scheduled, 0), coalesce(c.running, 0),
	coalesce(qp.until IS NULL OR qp.until > $1, false) AND qp.queue IS NOT NULL,
	qp.paused_at, qp.until, coalesce(qp.paused_by, ''), coalesce(qp.reason, '')
FROM names AS n
LEFT JOIN counts AS c ON c.queue = n.queue
LEFT JOIN twice_queue_pauses AS qp ON qp.queue = n.queue`

// QueueList lists the queues of unfinished jobs, pauses and nodes, by name.
// Counting reads only available and running jobs, never the finished
// history: available ones through the (state, id) index, running ones
// through twice_jobs_running_kind (the OR, not IN, lets the planner join
// the two partial indexes).
func (e *executor) QueueList(ctx context.Context, p *twicestore.QueueListParams) (*twicestore.QueueListResult, error) {
	rs, err := e.q.query(ctx, queueListSQL, nowOr(p.Now))
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	queues, err := driverkit.ReadQueues(rs, driverkit.NativeTimes)
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	return &twicestore.QueueListResult{Queues: queues}, nil
}

// QueueStranded lists the queues with available jobs that no node alive
// since AliveSince lists among the queues it works.
func (e *executor) QueueStranded(ctx context.Context, p *twicestore.QueueStrandedParams) (*twicestore.QueueStrandedResult, error) {
	// Group first, then look for a node once per queue rather than once
	// per job.
	rs, err := e.q.query(ctx, `SELECT g.queue, g.n, g.oldest FROM (
			SELECT queue, count(*) AS n, min(created_at) AS oldest FROM twice_jobs
			WHERE state = 'available' GROUP BY queue
		) AS g
		WHERE NOT EXISTS (
			SELECT 1 FROM twice_nodes AS n WHERE n.heartbeat_at >= $1 AND g.queue = ANY(n.queues)
		)`, p.AliveSince)
	if err != nil {
		return nil, fmt.Errorf("find stranded queues: %w", err)
	}
	queues, err := driverkit.ReadStranded(rs, driverkit.NativeTimes)
	if err != nil {
		return nil, fmt.Errorf("find stranded queues: %w", err)
	}
	return &twicestore.QueueStrandedResult{Queues: queues}, nil
}
