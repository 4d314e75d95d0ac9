package twicepg

// Durable waits (migration 025): a parked job waits in twice_jobs_waiting
// for a signal of the name in wait_name or for its timer (run_at), and a
// wait's resolution is a row of twice_signals. JobFinish parks a job (see
// finishSQL); JobSignal and JobWakeDue resolve waits and wake the jobs
// waiting on them.
//
// Each resolution is written together with the job's row: JobSignal locks
// the job, then inserts the signal and updates the job; JobWakeDue locks
// the waiting jobs it takes (skipping those locked), then inserts the
// timeouts and updates the jobs. Both take the job first, so a signal and
// the timer of the same wait are ordered by the job's row, and the
// primary key of twice_signals keeps one resolution per job and name
// whatever happens: the one that comes second finds the wait resolved, or
// the job no longer waiting.

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// signalLockSQL locks a job for a signal and reads what the signal
// depends on. The lock orders the signal with a park (which updates the
// row), with the timer of the same wait (JobWakeDue locks the row first
// too) and with other signals of the job.
const signalLockSQL = `SELECT state, wait_name FROM twice_jobs WHERE id = $1 FOR UPDATE`

// signalInsertSQL stores a wait's resolution unless the wait has one.
// ON CONFLICT waits for a resolution another transaction is writing, and
// then does nothing: the first one stays.
const signalInsertSQL = `INSERT INTO twice_signals (job_id, name, payload, timed_out, at, sender)
VALUES ($1, $2, $3::text::json, false, $4, $5)
ON CONFLICT (job_id, name) DO NOTHING`

// signalJobSQL records a new resolution on its job (locked by
// signalLockSQL): signal_seq grows, so a park of a delivery fetched
// before it turns the job available rather than waiting (see finishSQL),
// and a job waiting on the signal's name ($2) becomes available at $3, in
// the generation new jobs enter, and wakes its queue's workers ($4, the
// insert channel; delivered when the transaction commits).
const signalJobSQL = `WITH updated AS (
	UPDATE twice_jobs SET signal_seq = signal_seq + 1,
		state = CASE WHEN $2::boolean THEN 'available' ELSE state END,
		run_at = CASE WHEN $2::boolean THEN $3 ELSE run_at END,
		gen = CASE WHEN $2::boolean THEN twice_jobs_gen() ELSE gen END
	WHERE id = $1
	RETURNING queue
)
SELECT count(pg_notify($4, queue)) FROM updated WHERE $2::boolean`

// signalColumns are the columns of a twice_signals row, in scanSignal's
// order. The payload is read as text, the very JSON the sender sent.
const signalColumns = `job_id, name, payload::text, timed_out, at, sender`

// JobSignal resolves the wait p.Name of job p.JobID, in one transaction
// (the caller's, on an executor of a transaction): it locks the job,
// stores the signal unless the wait is resolved already (then it returns
// that resolution as Existing and changes nothing), counts it in the
// job's signal_seq, and makes the job available at p.Now when it waits
// on p.Name. See twicestore.WaitExecutor.
func (e *executor) JobSignal(ctx context.Context, p *twicestore.JobSignalParams) (*twicestore.JobSignalResult, error) {
	if err := p.CheckSignal(); err != nil {
		return nil, err
	}
	payload := "null"
	if p.Payload != nil {
		if !json.Valid(p.Payload) {
			return nil, fmt.Errorf("signal %q for job %d: its payload is not JSON: %w", p.Name, p.JobID, twicestore.ErrUnstorable)
		}
		payload = string(p.Payload)
	}
	now := nowOr(p.Now)
	var res *twicestore.JobSignalResult
	err := e.inTx(ctx, func(tx *executor) error {
		res = &twicestore.JobSignalResult{}
		var state, waitName string
		err := tx.q.queryRow(ctx, signalLockSQL, p.JobID).Scan(&state, &waitName)
		if isNoRows(err) {
			return twicestore.ErrNotFound
		}
		if err != nil {
			return err
		}
		if twicetype.JobState(state).Finished() {
			// A repeat of a signal the job took is a duplicate, whenever
			// it comes; a new one is refused.
			existing, err := scanSignal(tx.q.queryRow(ctx, signalGetSQL, p.JobID, p.Name))
			if isNoRows(err) {
				return twicestore.ErrJobFinished
			}
			res.Existing = existing
			return err
		}
		n, err := tx.q.exec(ctx, signalInsertSQL, p.JobID, p.Name, payload, now, p.Sender)
		if err != nil {
			return err
		}
		if n == 0 {
			existing, err := scanSignal(tx.q.queryRow(ctx, signalGetSQL, p.JobID, p.Name))
			if err != nil {
				return fmt.Errorf("read the resolution the wait has: %w", err)
			}
			res.Existing = existing
			return nil
		}
		res.Woke = twicetype.JobState(state) == twicetype.JobStateWaiting && waitName == p.Name
		var notified int64
		return tx.q.queryRow(ctx, signalJobSQL, p.JobID, res.Woke, now, e.notify.channel).Scan(&notified)
	})
	if err != nil {
		return nil, fmt.Errorf("signal %q for job %d: %w", p.Name, p.JobID, err)
	}
	if res.Woke {
		e.floors.loweredAt(now)
	}
	return res, nil
}

// signalGetSQL reads the resolution of one wait of one job.
const signalGetSQL = `SELECT ` + signalColumns + ` FROM twice_signals WHERE job_id = $1 AND name = $2`

// JobSignalGet returns the resolution of wait p.Name of job p.JobID, or
// an error wrapping twicestore.ErrNotFound when it has none yet.
func (e *executor) JobSignalGet(ctx context.Context, p *twicestore.JobSignalGetParams) (*twicetype.Signal, error) {
	sig, err := scanSignal(e.q.queryRow(ctx, signalGetSQL, p.JobID, p.Name))
	if isNoRows(err) {
		return nil, fmt.Errorf("signal %q of job %d: %w", p.Name, p.JobID, twicestore.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("signal %q of job %d: %w", p.Name, p.JobID, err)
	}
	return sig, nil
}

// wakeSQL resolves, as timed out, the waits of the waiting jobs that
// match which (the timers that passed $1, or the jobs $4 whatever their
// timer), up to $2 of them (NULL: all), the timers that fire first first.
// due locks the jobs, skipping those another transaction holds (a signal
// resolving the same wait, which leaves the job no longer waiting, or a
// cancel): under the lock the job is still waiting, so its wait has no
// resolution from a signal, and none can come until this statement's
// transaction ends. resolved inserts the timeouts, dated when the timer
// fired (its time, or $1 when it fires early); woken makes each job
// available, due at that time too, in the generation new jobs enter, and
// counts the resolution in its signal_seq. notified wakes the queues of
// the woken jobs ($3, the insert channel).
func wakeSQL(which string) string {
	return `WITH due AS (
	SELECT id, wait_name, least(run_at, $1::timestamptz) AS fired FROM twice_jobs
	WHERE state = 'waiting' AND ` + which + `
	ORDER BY run_at, id
	LIMIT $2
	FOR UPDATE SKIP LOCKED
), resolved AS (
	INSERT INTO twice_signals (job_id, name, payload, timed_out, at)
	SELECT id, wait_name, NULL, true, fired FROM due ORDER BY id
	ON CONFLICT (job_id, name) DO NOTHING
), woken AS (
	UPDATE twice_jobs AS j SET state = 'available', run_at = d.fired, signal_seq = j.signal_seq + 1,
		gen = twice_jobs_gen()
	FROM due AS d
	WHERE j.id = ANY(ARRAY(SELECT id FROM due)) AND j.id = d.id AND j.state = 'waiting'
	RETURNING j.id, j.queue
), notified AS (
	SELECT count(pg_notify($3, q.queue)) AS n FROM (SELECT DISTINCT queue FROM woken) AS q
)
SELECT woken.id FROM woken CROSS JOIN notified`
}

// wakeDueSQL fires the timers that passed; wakeIDsSQL those of the jobs
// given, early.
var (
	wakeDueSQL = wakeSQL(`run_at <= $1 AND $4::bigint[] IS NULL`)
	wakeIDsSQL = wakeSQL(`id = ANY($4::bigint[])`)
)

// wakeTries bounds how often JobWakeDue runs wakeDueSQL on its own when
// jobs it was about to lock were moved meanwhile: a signal that woke a
// job in between moved it out of twice_jobs_waiting, and the lock fails
// with SQLSTATE 40001 rather than skip it (see moved.go). Every failure
// means another transaction woke a job, so the repeats cannot spin on
// their own; many signals at once may need more than movedTries.
const wakeTries = 20

// JobWakeDue resolves as timed out the waits of up to Limit waiting jobs
// whose timer is due at Now, and makes those jobs available, in one
// statement. See twicestore.WaitExecutor.
func (e *executor) JobWakeDue(ctx context.Context, p *twicestore.JobWakeDueParams) (*twicestore.JobWakeDueResult, error) {
	now := nowOr(p.Now)
	alone := autocommitsQuerier(e.q)
	for try := 1; ; try++ {
		query, ids := wakeDueSQL, []int64(nil)
		if p.IDs != nil {
			query, ids = wakeIDsSQL, p.IDs
		}
		ids, err := queryIDs(ctx, e.q, query, now, limitArg(p.Limit), e.notify.channel, ids)
		if isMoved(err) && alone && try < wakeTries && ctx.Err() == nil {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("wake jobs whose wait timed out: %w", err)
		}
		if len(ids) > 0 {
			e.floors.dropAll() // the woken jobs are due when their timers fired
		}
		return &twicestore.JobWakeDueResult{Woken: ids}, nil
	}
}

// scanSignal reads one row of signalColumns; a timeout's payload is nil.
var scanSignal = driverkit.SignalRow(driverkit.NativeTimes)
