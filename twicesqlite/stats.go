package twicesqlite

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
// FinishedAt falls in. Times are stored as microseconds, so the bucket is
// integer arithmetic on the column.
func (e *executor) JobThroughput(ctx context.Context, p *twicestore.JobThroughputParams) (*twicestore.JobThroughputResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	since, width := micros(p.Since), p.Bucket.Microseconds()
	rows, err := e.db.QueryContext(ctx, `SELECT (finished_at - ?) / ? AS b,
			SUM(state = 'completed'), SUM(state = 'dead')
		FROM twice_jobs
		WHERE state IN ('completed', 'dead') AND finished_at >= ? AND finished_at < ?
		GROUP BY b ORDER BY b`, since, width, since, micros(p.Until))
	if err != nil {
		return nil, fmt.Errorf("job throughput: %w", err)
	}
	buckets, err := dbrows.Collect(rows, driverkit.ThroughputRow(driverkit.FromMicros(since), width))
	if err != nil {
		return nil, fmt.Errorf("job throughput: %w", err)
	}
	return &twicestore.JobThroughputResult{Buckets: buckets}, nil
}

// JobQueueStats counts the available jobs of each queue, due and
// scheduled, with the oldest due RunAt.
func (e *executor) JobQueueStats(ctx context.Context, p *twicestore.JobQueueStatsParams) (*twicestore.JobQueueStatsResult, error) {
	now := micros(nowOr(p.Now))
	rows, err := e.db.QueryContext(ctx, `SELECT g.*, EXISTS (SELECT 1 FROM twice_queue_pauses AS qp
			WHERE qp.queue = g.queue AND (qp.until IS NULL OR qp.until > ?1))
		FROM (
			SELECT queue, SUM(run_at <= ?1), SUM(run_at > ?1), MIN(CASE WHEN run_at <= ?1 THEN run_at END)
			FROM twice_jobs WHERE state = 'available'
			GROUP BY queue
		) AS g ORDER BY g.queue`, now)
	if err != nil {
		return nil, fmt.Errorf("queue stats: %w", err)
	}
	queues, err := dbrows.Collect(rows, driverkit.QueueStatRow(driverkit.MicrosTimes))
	if err != nil {
		return nil, fmt.Errorf("queue stats: %w", err)
	}
	return &twicestore.JobQueueStatsResult{Queues: queues}, nil
}
