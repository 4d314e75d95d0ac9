package twicepg

// Aggregates for the dashboard and the metrics: throughput over a window
// and the depth and age of each queue.

import (
	"context"
	"fmt"
	"time"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
)

// JobThroughput counts completed and dead jobs by the bucket their
// FinishedAt falls in, the bucket computed in whole microseconds so it
// matches SQLite's.
func (e *executor) JobThroughput(ctx context.Context, p *twicestore.JobThroughputParams) (*twicestore.JobThroughputResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	width := p.Bucket.Microseconds()
	rs, err := e.q.query(ctx, `SELECT b, count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE state = 'dead')
		FROM (
			SELECT state, floor(extract(epoch FROM finished_at - $1::timestamptz) * 1000000 / $2)::bigint AS b
			FROM twice_jobs
			WHERE state IN ('completed', 'dead') AND finished_at >= $1 AND finished_at < $3
		) AS f
		GROUP BY b ORDER BY b`, p.Since, width, p.Until)
	if err != nil {
		return nil, fmt.Errorf("job throughput: %w", err)
	}
	buckets, err := dbrows.Collect(rs, driverkit.ThroughputRow(p.Since, width))
	if err != nil {
		return nil, fmt.Errorf("job throughput: %w", err)
	}
	return &twicestore.JobThroughputResult{Buckets: buckets}, nil
}

// JobQueueStats counts the available jobs of each queue, due and
// scheduled, with the oldest due RunAt.
func (e *executor) JobQueueStats(ctx context.Context, p *twicestore.JobQueueStatsParams) (*twicestore.JobQueueStatsResult, error) {
	now := p.Now
	if now.IsZero() {
		now = time.Now()
	}
	rs, err := e.q.query(ctx, `SELECT g.*, EXISTS (SELECT 1 FROM twice_queue_pauses AS qp
			WHERE qp.queue = g.queue AND (qp.until IS NULL OR qp.until > $1))
		FROM (
			SELECT queue, count(*) FILTER (WHERE run_at <= $1), count(*) FILTER (WHERE run_at > $1),
				min(run_at) FILTER (WHERE run_at <= $1)
			FROM twice_jobs WHERE state = 'available'
			GROUP BY queue
		) AS g ORDER BY g.queue COLLATE "C"`, now)
	if err != nil {
		return nil, fmt.Errorf("queue stats: %w", err)
	}
	queues, err := dbrows.Collect(rs, driverkit.QueueStatRow(driverkit.NativeTimes))
	if err != nil {
		return nil, fmt.Errorf("queue stats: %w", err)
	}
	return &twicestore.JobQueueStatsResult{Queues: queues}, nil
}
