package twicemysql

// Durable waits: a parked job waits in state 'waiting' until a signal of
// its wait's name arrives or its timer (run_at) fires; twice_signals keeps
// one resolution per wait of a job. A park itself is a JobFinish outcome.
//
// Each resolution is written with the job's row locked: JobSignal locks
// the job (FOR UPDATE), JobWakeDue locks the waiting jobs it takes
// (skipping those another transaction holds). So a signal and the timer of
// the same wait are ordered by the job's row, and the primary key of
// twice_signals keeps one resolution per job and name whatever happens:
// the one that comes second finds the wait resolved, or the job no longer
// waiting.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// signalInsertSQL stores a signal as its wait's resolution. The primary
// key (job_id, name) refuses a second resolution of the same wait; the
// caller reads that one instead.
const signalInsertSQL = `INSERT INTO twice_signals (job_id, name, payload, timed_out, at, sender)
VALUES (?, ?, ?, 0, ?, ?)`

// signalWakeSQL counts a stored signal on its job (signal_seq, which a
// park compares with the count its delivery was fetched with) and, when
// the job waits on the signal's name, makes it available at the signal's
// time: its handler runs again and reads the signal. The CASEs read state
// and wait_name before state is assigned (MySQL assigns left to right).
const signalWakeSQL = `UPDATE twice_jobs SET
	run_at = IF(state = 'waiting' AND wait_name = ?, ?, run_at),
	state = IF(state = 'waiting' AND wait_name = ?, 'available', state),
	signal_seq = signal_seq + 1
WHERE id = ?`

// JobSignal resolves the wait p.Name of job p.JobID with p.Payload, in one
// transaction (or the caller's): it locks the job, stores the signal
// unless the wait has a resolution already (then it returns that one as
// Existing and changes nothing), counts it on the job and wakes the job
// when it waits on that name. A signal CheckSignal refuses, or one for no
// job or a finished one, stores nothing.
func (e *executor) JobSignal(ctx context.Context, p *twicestore.JobSignalParams) (*twicestore.JobSignalResult, error) {
	if err := p.CheckSignal(); err != nil {
		return nil, err
	}
	now := dbTime(nowOr(p.Now))
	payload := []byte("null")
	if p.Payload != nil {
		payload = p.Payload
	}
	var res *twicestore.JobSignalResult
	err := e.inTx(ctx, func(q dbtx) error {
		res = &twicestore.JobSignalResult{}
		var state, waitName string
		err := q.QueryRowContext(ctx, `SELECT state, wait_name FROM twice_jobs WHERE id = ? FOR UPDATE`, p.JobID).Scan(&state, &waitName)
		if errors.Is(err, sql.ErrNoRows) {
			return twicestore.ErrNotFound
		}
		if err != nil {
			return err
		}
		if twicetype.JobState(state).Finished() {
			// A repeat of a signal the job took is a duplicate, whenever
			// it comes; a new one is refused.
			res.Existing, err = getSignal(ctx, q, p.JobID, p.Name)
			if errors.Is(err, twicestore.ErrNotFound) {
				return twicestore.ErrJobFinished
			}
			return err
		}
		// A failed statement leaves a MySQL transaction usable, so the
		// duplicate is told by the key's refusal.
		if _, err := q.ExecContext(ctx, signalInsertSQL, p.JobID, p.Name, payload, now, p.Sender); err != nil {
			if !isUniqueViolation(err) {
				return err
			}
			res.Existing, err = getSignal(ctx, q, p.JobID, p.Name)
			return err
		}
		if _, err := q.ExecContext(ctx, signalWakeSQL, p.Name, now, p.Name, p.JobID); err != nil {
			return err
		}
		res.Woke = twicetype.JobState(state) == twicetype.JobStateWaiting && waitName == p.Name
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("signal %q to job %d: %w", p.Name, p.JobID, err)
	}
	return res, nil
}

// JobSignalGet returns the resolution of wait p.Name of job p.JobID, or an
// error wrapping twicestore.ErrNotFound when it has none.
func (e *executor) JobSignalGet(ctx context.Context, p *twicestore.JobSignalGetParams) (*twicetype.Signal, error) {
	s, err := getSignal(ctx, e.db, p.JobID, p.Name)
	if err != nil {
		return nil, fmt.Errorf("read signal %q of job %d: %w", p.Name, p.JobID, err)
	}
	return s, nil
}

// getSignal reads one resolution, ErrNotFound when there is none.
func getSignal(ctx context.Context, q dbtx, jobID int64, name string) (*twicetype.Signal, error) {
	return driverkit.GetSignal(ctx, q, scanSignal, jobID, name)
}

// wakeTimeoutSQL resolves the wait of each job of the IN list (locked, and
// waiting) as timed out, at the time its timer fired (its run_at, or the
// given time when it fires early). A resolution already stored for the
// wait's name (a signal that came before the job parked on it) stays: the
// no-op update leaves it.
const wakeTimeoutSQL = `INSERT INTO twice_signals (job_id, name, payload, timed_out, at, sender)
SELECT id, wait_name, NULL, 1, LEAST(run_at, ?), '' FROM twice_jobs
WHERE state = 'waiting' AND id IN %s
ON DUPLICATE KEY UPDATE timed_out = twice_signals.timed_out`

// wakeJobsSQL makes each waiting job of the IN list available, due at the
// time its timer fired, and counts the timer in signal_seq.
const wakeJobsSQL = `UPDATE twice_jobs SET run_at = LEAST(run_at, ?), state = 'available', signal_seq = signal_seq + 1
WHERE state = 'waiting' AND id IN %s`

// JobWakeDue resolves as timed out the waits of up to Limit waiting jobs
// whose timer is at or before Now (or of the waiting jobs of IDs, early),
// and makes them available, in one transaction. The jobs are locked with
// SKIP LOCKED: one a signal holds is the signal's to resolve; the index on
// (state, run_at, id) yields the due ones oldest first, so LIMIT stops the
// walk.
func (e *executor) JobWakeDue(ctx context.Context, p *twicestore.JobWakeDueParams) (*twicestore.JobWakeDueResult, error) {
	now := dbTime(nowOr(p.Now))
	limit := ""
	if p.Limit > 0 {
		limit = ` LIMIT ` + strconv.Itoa(p.Limit)
	}
	res := &twicestore.JobWakeDueResult{}
	err := e.inTx(ctx, func(q dbtx) error {
		// FORCE INDEX: without statistics the planner may take the fetch
		// index and sort every due waiting job, locking them all.
		query, args := `SELECT id FROM twice_jobs FORCE INDEX (twice_jobs_wait_due)
			WHERE wait_due_at <= ? AND state = 'waiting'`, []any{now}
		if p.IDs != nil {
			if len(p.IDs) == 0 {
				return nil
			}
			list, ids := in(p.IDs)
			query, args = `SELECT id FROM twice_jobs WHERE state = 'waiting' AND id IN `+list, ids
		}
		rows, err := q.QueryContext(ctx, query+` ORDER BY wait_due_at, id`+limit+` FOR UPDATE SKIP LOCKED`, args...) // wait_due_at is run_at while waiting
		if err != nil {
			return err
		}
		ids, err := dbrows.Collect(rows, dbrows.One[int64])
		if err != nil || len(ids) == 0 {
			return err
		}
		list, idArgs := in(ids)
		if _, err := q.ExecContext(ctx, fmt.Sprintf(wakeTimeoutSQL, list), append([]any{now}, idArgs...)...); err != nil {
			return err
		}
		if _, err := q.ExecContext(ctx, fmt.Sprintf(wakeJobsSQL, list), append([]any{now}, idArgs...)...); err != nil {
			return err
		}
		res.Woken = ids
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("wake due waits: %w", err)
	}
	return res, nil
}

// scanSignal reads one row of driverkit.SignalColumns; a timeout's payload is nil.
var scanSignal = driverkit.SignalRow(driverkit.NativeTimes)
