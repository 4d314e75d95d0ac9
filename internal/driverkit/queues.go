package driverkit

import (
	"cmp"
	"slices"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/twicetype"
)

// ReadQueues reads QueueList's rows of name, due, scheduled, running,
// paused, paused_at, until, paused_by, reason, its times as tm says, and
// closes rows. A queue that is not paused reports no pause's by and
// reason. The queues come sorted by the name's bytes, whatever order the
// database's collation or union returned them in.
func ReadQueues[T, N any](rows dbrows.Rows, tm Times[T, N]) ([]twicetype.QueueInfo, error) {
	qs, err := dbrows.Collect(rows, func(r dbrows.Scanner) (twicetype.QueueInfo, error) {
		var (
			q               twicetype.QueueInfo
			pausedAt, until N
		)
		if err := r.Scan(&q.Name, &q.Due, &q.Scheduled, &q.Running, &q.Paused, &pausedAt, &until, &q.By, &q.Reason); err != nil {
			return q, err
		}
		if q.Paused {
			q.PausedAt, q.Until = tm.Null(pausedAt), tm.Null(until)
		} else {
			q.By, q.Reason = "", ""
		}
		return q, nil
	})
	slices.SortFunc(qs, func(a, b twicetype.QueueInfo) int { return cmp.Compare(a.Name, b.Name) })
	return qs, err
}

// ReadStranded reads QueueStranded's rows of queue, count, oldest, oldest
// as tm says, and closes rows. The queues come sorted by their bytes.
func ReadStranded[T, N any](rows dbrows.Rows, tm Times[T, N]) ([]twicetype.StrandedQueue, error) {
	qs, err := dbrows.Collect(rows, func(r dbrows.Scanner) (twicetype.StrandedQueue, error) {
		var (
			q      twicetype.StrandedQueue
			oldest T
		)
		if err := r.Scan(&q.Queue, &q.Count, &oldest); err != nil {
			return q, err
		}
		q.Oldest = tm.At(oldest)
		return q, nil
	})
	slices.SortFunc(qs, func(a, b twicetype.StrandedQueue) int { return cmp.Compare(a.Queue, b.Queue) })
	return qs, err
}
