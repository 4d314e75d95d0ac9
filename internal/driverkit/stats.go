package driverkit

import (
	"time"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/twicestore"
)

// ThroughputRow returns the reader of one row of JobThroughput's buckets,
// its columns selected as b (the bucket's number: whole widths of width
// microseconds from since), completed, dead. A bucket starts at since
// plus b widths, in UTC.
func ThroughputRow(since time.Time, width int64) func(dbrows.Scanner) (twicestore.ThroughputBucket, error) {
	return func(r dbrows.Scanner) (twicestore.ThroughputBucket, error) {
		var (
			b int64
			t twicestore.ThroughputBucket
		)
		if err := r.Scan(&b, &t.Completed, &t.Dead); err != nil {
			return t, err
		}
		t.Start = since.Add(time.Duration(b*width) * time.Microsecond).UTC()
		return t, nil
	}
}

// QueueStatRow returns the reader of one row of JobQueueStats, its columns
// selected as queue, due, scheduled, the oldest due run_at (NULL when
// none is due), paused; the time read as tm says.
func QueueStatRow[T, N any](tm Times[T, N]) func(dbrows.Scanner) (twicestore.QueueStat, error) {
	return func(r dbrows.Scanner) (twicestore.QueueStat, error) {
		var (
			q      twicestore.QueueStat
			oldest N
		)
		if err := r.Scan(&q.Queue, &q.Due, &q.Scheduled, &oldest, &q.Paused); err != nil {
			return q, err
		}
		q.OldestDue = tm.Null(oldest)
		return q, nil
	}
}
