package twicemysql

import (
	"context"
	"database/sql"
	"time"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/twicestore"
)

// MySQL has no LISTEN/NOTIFY. Workers in other processes learn of new jobs
// and of flipped kill switches by a cheap poll instead: one primary-key
// lookup of the newest id (of twice_jobs, of the switch and limit
// histories), which reads one index entry whatever the table's size. The
// interval adapts: WakePollMin after a change was seen, doubling while
// nothing changes up to WakePollMax, so a busy cluster hears of a job
// within tens of milliseconds and an idle node asks a few times a second.
const (
	// WakePollMin is the wake-up poll's interval while changes arrive.
	WakePollMin = 20 * time.Millisecond
	// WakePollMax is the wake-up poll's interval on an idle database.
	WakePollMax = 250 * time.Millisecond
)

// wakeScanMax bounds the new jobs one poll reads the queues of; a larger
// burst is read over the next polls, at WakePollMin.
const wakeScanMax = 1000

var (
	_ twicestore.InsertListener = (*Store)(nil)
	_ twicestore.ToggleListener = (*Store)(nil)
)

// ListenInserts calls notify with the queue of jobs inserted since the
// last poll, by any process, until ctx is done. A job committed after a
// newer one was seen can be missed: a wake-up is a hint, and the worker's
// own poll timer covers it. Errors (a lost connection) are retried at
// WakePollMax; it returns ctx's error.
func (s *Store) ListenInserts(ctx context.Context, notify func(queue string)) error {
	var last int64
	known := false
	return pollChanges(ctx, func(ctx context.Context) (bool, error) {
		if !known {
			if err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM twice_jobs`).Scan(&last); err != nil {
				return false, err
			}
			known = true
			return false, nil
		}
		rows, err := s.db.QueryContext(ctx,
			`SELECT id, queue FROM twice_jobs WHERE id > ? ORDER BY id LIMIT ?`, last, wakeScanMax)
		if err != nil {
			return false, err
		}
		queues := map[string]bool{}
		err = dbrows.Each(rows, func(r dbrows.Scanner) error {
			var q string
			if err := r.Scan(&last, &q); err != nil {
				return err
			}
			queues[q] = true
			return nil
		})
		if err != nil {
			return false, err
		}
		for q := range queues {
			notify(q)
		}
		return len(queues) > 0, nil
	})
}

// ListenToggles calls notify whenever a kill switch or a limit override
// changed since the last poll (a new row in either history), until ctx is
// done; it returns ctx's error.
func (s *Store) ListenToggles(ctx context.Context, notify func()) error {
	var lastToggle, lastLimit sql.NullInt64
	known := false
	return pollChanges(ctx, func(ctx context.Context) (bool, error) {
		var toggle, limit sql.NullInt64
		err := s.db.QueryRowContext(ctx, `SELECT (SELECT MAX(id) FROM twice_toggle_history),
			(SELECT MAX(id) FROM twice_limit_history)`).Scan(&toggle, &limit)
		if err != nil {
			return false, err
		}
		changed := known && (toggle != lastToggle || limit != lastLimit)
		lastToggle, lastLimit, known = toggle, limit, true
		if changed {
			notify()
		}
		return changed, nil
	})
}

// pollChanges runs poll until ctx is done, at WakePollMin after a poll that
// saw a change and at twice the last interval (at most WakePollMax) after
// one that did not or failed. It returns ctx's error.
func pollChanges(ctx context.Context, poll func(ctx context.Context) (bool, error)) error {
	interval := WakePollMin
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
		changed, err := poll(ctx)
		switch {
		case err == nil && changed:
			interval = WakePollMin
		default:
			interval = min(2*interval, WakePollMax)
		}
		timer.Reset(interval)
	}
}
