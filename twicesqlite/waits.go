package twicesqlite

// Durable waits (twicestore.WaitExecutor, migration 019): a parked job
// waits in state 'waiting' until a signal of its wait's name arrives or
// its timer fires; twice_signals keeps one resolution per wait of a job.
// A park itself is a JobFinish outcome (finishSQL).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// signalInsertSQL stores a signal as its wait's resolution unless the wait
// has one (a signal of that name, or its timeout): the primary key (job_id,
// name) settles the race with the timer and with a duplicate, and the
// RowsAffected of 0 tells the caller it lost.
const signalInsertSQL = `INSERT INTO twice_signals (job_id, name, payload, timed_out, at, sender)
VALUES (?, ?, ?, 0, ?, ?)
ON CONFLICT (job_id, name) DO NOTHING`

// signalWakeSQL counts a stored signal on its job (signal_seq, which a
// park compares with the count its delivery was fetched with) and makes a
// job waiting on that very name available at the signal's time: its
// handler runs again and reads the signal. It runs in the transaction that
// stored the signal, so the two are one write.
const signalWakeSQL = `UPDATE twice_jobs SET
	signal_seq = signal_seq + 1,
	state = CASE WHEN state = 'waiting' AND wait_name = ?2 THEN 'available' ELSE state END,
	run_at = CASE WHEN state = 'waiting' AND wait_name = ?2 THEN ?3 ELSE run_at END
WHERE id = ?1`

// JobSignal resolves the wait p.Name of job p.JobID with p.Payload, in one
// transaction (or the caller's): the job is read, the signal stored unless
// the wait is resolved already, and the job counts it and wakes when it
// waits on that name. A signal CheckSignal refuses, or one for no job or a
// finished one, stores nothing.
func (e *executor) JobSignal(ctx context.Context, p *twicestore.JobSignalParams) (*twicestore.JobSignalResult, error) {
	if err := p.CheckSignal(); err != nil {
		return nil, err
	}
	now := micros(nowOr(p.Now))
	payload := "null"
	if p.Payload != nil {
		payload = string(p.Payload)
	}
	res := &twicestore.JobSignalResult{}
	err := e.inTx(ctx, func(q dbtx) error {
		var state, waitName string
		err := q.QueryRowContext(ctx, `SELECT state, wait_name FROM twice_jobs WHERE id = ?`, p.JobID).Scan(&state, &waitName)
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
		r, err := q.ExecContext(ctx, signalInsertSQL, p.JobID, p.Name, payload, now, p.Sender)
		if err != nil {
			return err
		}
		n, err := r.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			res.Existing, err = getSignal(ctx, q, p.JobID, p.Name)
			return err
		}
		if _, err := q.ExecContext(ctx, signalWakeSQL, p.JobID, p.Name, now); err != nil {
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

// wakeDueSQL finds the waiting jobs whose timer has passed, oldest timer
// first. INDEXED BY pins the partial index of waiting jobs by (run_at, id)
// of migration 019, which yields them in that order, so the LIMIT stops
// the walk; without statistics the planner might prefer (state, id) and
// sort every waiting job.
const wakeDueSQL = `SELECT id FROM twice_jobs INDEXED BY twice_jobs_wait_due
WHERE state = 'waiting' AND run_at <= ? ORDER BY run_at, id LIMIT ?`

// wakeTimeoutSQL resolves the wait of each job of the JSON id list as
// timed out, at the time its timer fired (its run_at, or the given time
// when it fires early), unless a signal
// of the wait's name resolved it first: ON CONFLICT leaves that one.
const wakeTimeoutSQL = `INSERT INTO twice_signals (job_id, name, payload, timed_out, at, sender)
SELECT id, wait_name, NULL, 1, min(run_at, ?), '' FROM twice_jobs
WHERE id IN (SELECT value FROM json_each(?)) AND state = 'waiting'
ON CONFLICT (job_id, name) DO NOTHING`

// wakeIDsSQL selects the waiting jobs of the JSON id list, whose timers
// fire early (JobWakeDueParams.IDs).
const wakeIDsSQL = `SELECT id FROM twice_jobs
WHERE id IN (SELECT value FROM json_each(?)) AND state = 'waiting' ORDER BY run_at, id LIMIT ?`

// wakeJobsSQL makes each waiting job of the JSON id list available, due
// at the time its timer fired (run_at stays, or becomes the given time
// when it fires early), and counts the timer in signal_seq.
// It leaves finished_at alone: the batch and workflow triggers, which a
// move between unfinished states does not concern, do not fire.
const wakeJobsSQL = `UPDATE twice_jobs SET state = 'available', signal_seq = signal_seq + 1, run_at = min(run_at, ?)
WHERE id IN (SELECT value FROM json_each(?)) AND state = 'waiting'`

// JobWakeDue resolves as timed out the waits of up to Limit waiting jobs
// whose timer is at or before Now, and makes them available, in one
// transaction: each job's resolution and its wake are one write.
func (e *executor) JobWakeDue(ctx context.Context, p *twicestore.JobWakeDueParams) (*twicestore.JobWakeDueResult, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	now := micros(nowOr(p.Now))
	res := &twicestore.JobWakeDueResult{}
	err := e.inTx(ctx, func(q dbtx) error {
		query, args := wakeDueSQL, []any{now, limit}
		if p.IDs != nil {
			query, args = wakeIDsSQL, []any{jsonArg(p.IDs), limit}
		}
		rows, err := q.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		ids, err := dbrows.Collect(rows, dbrows.One[int64])
		if err != nil || len(ids) == 0 {
			return err
		}
		list := jsonArg(ids)
		if _, err := q.ExecContext(ctx, wakeTimeoutSQL, now, list); err != nil {
			return err
		}
		if _, err := q.ExecContext(ctx, wakeJobsSQL, now, list); err != nil {
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
var scanSignal = driverkit.SignalRow(driverkit.MicrosTimes)
