package twicemysql

// Aggregates for the dashboard and the metrics: throughput over a window
// and the depth and age of each queue.

import (
	"context"
	"fmt"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
)

// JobThroughput counts completed and dead jobs by the bucket their
// FinishedAt falls in: the bucket is the whole number of bucket widths
// between Since and the finish, in microseconds (TIMESTAMPDIFF), which
// the (finished_at, id) index serves.
func (e *executor) JobThroughput(ctx context.Context, p *twicestore.JobThroughputParams) (*twicestore.JobThroughputResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	since, width := dbTime(p.Since), p.Bucket.Microseconds()
	if width <= 0 {
		width = 1 // a bucket under a microsecond: each stored time is its own
	}
	rows, err := e.db.QueryContext(ctx, `SELECT TIMESTAMPDIFF(MICROSECOND, ?, finished_at) DIV ? AS b,
			SUM(state = 'completed'), SUM(state = 'dead')
		FROM twice_jobs
		WHERE state IN ('completed', 'dead') AND finished_at >= ? AND finished_at < ?
		GROUP BY b ORDER BY b`, since, width, since, dbTime(p.Until))
	if err != nil {
		return nil, fmt.Errorf("job throughput: %w", err)
	}
	buckets, err := dbrows.Collect(rows, driverkit.ThroughputRow(since, width))
	if err != nil {
		return nil, fmt.Errorf("job throughput: %w", err)
	}
	return &twicestore.JobThroughputResult{Buckets: buckets}, nil
}

// JobQueueStats counts the available jobs of each queue, due and
// scheduled, with the oldest due RunAt.
func (e *executor) JobQueueStats(ctx context.Context, p *twicestore.JobQueueStatsParams) (*twicestore.JobQueueStatsResult, error) {
	now := dbTime(nowOr(p.Now))
	rows, err := e.db.QueryContext(ctx, `SELECT g.queue, g.due, g.scheduled, g.oldest, EXISTS (
			SELECT 1 FROM twice_queue_pauses AS qp WHERE qp.queue = g.queue AND (qp.until IS NULL OR qp.until > ?))
		FROM (
			SELECT queue, SUM(run_at <= ?) AS due, SUM(run_at > ?) AS scheduled,
				MIN(CASE WHEN run_at <= ? THEN run_at END) AS oldest
			FROM twice_jobs WHERE state = 'available'
			GROUP BY queue
		) AS g ORDER BY g.queue`, now, now, now, now)
	if err != nil {
		return nil, fmt.Errorf("queue stats: %w", err)
	}
	queues, err := dbrows.Collect(rows, driverkit.QueueStatRow(driverkit.NativeTimes))
	if err != nil {
		return nil, fmt.Errorf("queue stats: %w", err)
	}
	return &twicestore.JobQueueStatsResult{Queues: queues}, nil
}
