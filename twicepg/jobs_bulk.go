package twicepg

// The operator's bulk actions on jobs (retry, discard, cancel, delete), each
// one statement with a result per job. Each statement first locks the jobs
// the filter matches, in id order (so two actions over the same jobs, or an
// action and a batch of outcomes, which also go in id order, wait for each
// other rather than deadlock), and reads their state as locked: a job a
// worker finished while the action waited is seen finished. It then acts on
// each job under the action's own state guard, so one job the action does
// not apply to never stops the others.

import (
	"context"
	"fmt"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// matchedSQL is the first step of every bulk action: the jobs the filter
// (rendered after the action's own numbered arguments) matches, locked.
const matchedSQL = `matched AS (
	SELECT j.id, j.state, j.kind, j.unique_key, j.cancel_requested_at IS NOT NULL AS cancel_asked,
		j.workflow_id IS NOT NULL OR j.batch_id IS NOT NULL AS composed
	FROM twice_jobs AS j WHERE %s ORDER BY j.id FOR UPDATE
)`

// bulk runs an action's statement, whose rows are (id, state as matched,
// changed), and turns each row into a result with decide.
func (e *executor) bulk(ctx context.Context, what string, f twicestore.JobFilter, query string, args []any,
	decide func(state twicetype.JobState, changed bool) twicestore.JobActionResult) (*twicestore.JobBulkResult, error) {
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	where, fargs := filterSQL(f, len(args))
	rs, err := e.q.query(ctx, fmt.Sprintf(query, where), append(args, fargs...)...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	var results []twicestore.JobActionResult
	for rs, err := range dbrows.Iter(rs) {
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		var (
			id      int64
			state   string
			changed bool
		)
		if err := rs.Scan(&id, &state, &changed); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		r := decide(twicetype.JobState(state), changed)
		r.ID = id
		results = append(results, r)
	}
	return driverkit.FinishResults(f, results), nil
}

// retrySQL retries the matched dead, discarded and cancelled jobs, and with
// $2 the completed ones that are no workflow task or batch member (their
// completion fired its edges already), except a
// unique job whose key another job of its kind holds (held: one the unique
// index covers, unfinished or finished in one of its unique states, such as
// a completed job that keeps its key), and, among matched jobs sharing a
// kind and unique key, all but the one with the lowest id (chosen):
// retrying two would break the unique index, and the others conflict with
// that one. A retried job is available, which every job's unique states
// include, so it always takes its key back; no other change of state can
// move a job into holding its key (see twicetype.UniqueStates.Validate).
var retrySQL = `WITH ` + matchedSQL + `,
retryable AS (
	SELECT * FROM matched WHERE state IN ('dead', 'discarded', 'cancelled')
		OR ($2::boolean AND state = 'completed' AND NOT composed)
),
held AS (
	SELECT DISTINCT ON (r.id) r.id, h.id AS holder
	FROM retryable AS r
	JOIN twice_jobs AS h ON h.kind = r.kind AND h.unique_key = r.unique_key AND h.id <> r.id
		AND ` + driverkit.UniqueHeldSQL("h") + `
	WHERE r.unique_key <> ''
	ORDER BY r.id, h.id
),
chosen AS (
	SELECT r.id FROM retryable AS r WHERE r.unique_key = ''
	UNION ALL
	(SELECT DISTINCT ON (r.kind, r.unique_key) r.id FROM retryable AS r
	WHERE r.unique_key <> '' AND NOT EXISTS (SELECT 1 FROM held WHERE held.id = r.id)
	ORDER BY r.kind, r.unique_key, r.id)
),
retried AS (
	UPDATE twice_jobs AS j SET state = 'available', attempt = 0, run_at = $1, lease_until = NULL,
		finished_at = NULL, cancel_requested_at = NULL, cancel_by = '', cancel_reason = '', snoozes = 0
	FROM chosen WHERE j.id = chosen.id
	RETURNING j.id
)
SELECT m.id, m.state, m.kind, m.unique_key, m.composed, r.id IS NOT NULL, coalesce(held.holder, 0)
FROM matched AS m
LEFT JOIN retried AS r ON r.id = m.id
LEFT JOIN held ON held.id = m.id`

// retryTries bounds how often a retry is repeated when a job holding a
// unique key was inserted, and committed, while the statement ran: too
// late for held to see it, so the update broke the unique index and
// changed nothing.
const retryTries = 3

// JobRetry moves matching dead, discarded or cancelled jobs (and completed
// ones with p.Completed, but for workflow tasks and batch members) back to
// available, due at Now, with their attempts reset, their cancel request
// cleared and their error history kept. The lease epoch is never reset: it
// must only grow for fencing to hold. A unique job whose key another job of
// its kind holds (one enqueued after it finished, a finished one holding
// its key in one of its unique states, or a matched job with a lower id
// that this call retries) is left as it is, with a conflict result naming
// the holder.
func (e *executor) JobRetry(ctx context.Context, p *twicestore.JobBulkParams) (*twicestore.JobBulkResult, error) {
	if err := p.Filter.Validate(); err != nil {
		return nil, fmt.Errorf("retry jobs: %w", err)
	}
	where, args := filterSQL(p.Filter, 2)
	args = append([]any{nowOr(p.Now), p.Completed}, args...)
	for try := 1; ; try++ {
		res, err := e.retry(ctx, fmt.Sprintf(retrySQL, where), args, p.Completed)
		if isUniqueViolation(err) && try < retryTries {
			continue
		}
		if isUniqueViolation(err) {
			return nil, fmt.Errorf("retry jobs: jobs holding the same unique keys kept being enqueued while retrying; try again: %w", err)
		}
		if err != nil {
			return nil, fmt.Errorf("retry jobs: %w", err)
		}
		e.floors.dropAll() // the retried jobs' places in the order are not known here
		return driverkit.FinishResults(p.Filter, res), nil
	}
}

func (e *executor) retry(ctx context.Context, query string, args []any, completed bool) ([]twicestore.JobActionResult, error) {
	rs, err := e.q.query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	var (
		results []twicestore.JobActionResult
		refs    []uniqueRef
		retried = map[uniqueRef]int64{} // the retried job of each unique key
	)
	for rs, err := range dbrows.Iter(rs) {
		if err != nil {
			return nil, err
		}
		var (
			r          twicestore.JobActionResult
			state      string
			ref        uniqueRef
			composed   bool
			wasRetried bool
		)
		if err := rs.Scan(&r.ID, &state, &ref.kind, &ref.key, &composed, &wasRetried, &r.HolderID); err != nil {
			return nil, err
		}
		r.State = twicetype.JobState(state)
		r.Status = driverkit.RetryStatus(r.State, completed, composed, wasRetried)
		if wasRetried {
			r.State = twicetype.JobStateAvailable
			if ref.key != "" {
				retried[ref] = r.ID
			}
		}
		results, refs = append(results, r), append(refs, ref)
	}
	for i := range results {
		if results[i].Status == twicestore.JobActionConflict && results[i].HolderID == 0 {
			results[i].HolderID = retried[refs[i]]
		}
	}
	return results, nil
}

// discardSQL discards the matched dead jobs.
const discardSQL = `WITH ` + matchedSQL + `,
changed AS (
	UPDATE twice_jobs AS j SET state = 'discarded', finished_at = $1
	FROM matched AS m WHERE j.id = m.id AND m.state = 'dead'
	RETURNING j.id
)
SELECT m.id, m.state, c.id IS NOT NULL FROM matched AS m LEFT JOIN changed AS c ON c.id = m.id`

// JobDiscard moves matching dead jobs to discarded, finished at Now.
func (e *executor) JobDiscard(ctx context.Context, p *twicestore.JobBulkParams) (*twicestore.JobBulkResult, error) {
	return e.bulk(ctx, "discard jobs", p.Filter, discardSQL, []any{nowOr(p.Now)},
		func(state twicetype.JobState, changed bool) twicestore.JobActionResult {
			if changed {
				return twicestore.JobActionResult{Status: twicestore.JobActionDone, State: twicetype.JobStateDiscarded}
			}
			return twicestore.JobActionResult{Status: twicestore.JobActionWrongState, State: state}
		})
}

// runNowSQL makes the matched available jobs due at $1 (a job already
// due keeps its run time) and wakes their queues ($2, the insert
// channel); joining notified makes it run.
const runNowSQL = `WITH ` + matchedSQL + `,
changed AS (
	UPDATE twice_jobs AS j SET run_at = least(j.run_at, $1)
	FROM matched AS m WHERE j.id = m.id AND m.state = 'available'
	RETURNING j.id, j.queue
),
notified AS (
	SELECT count(pg_notify($2, q.queue)) AS n FROM (SELECT DISTINCT queue FROM changed) AS q
)
SELECT m.id, m.state, c.id IS NOT NULL FROM matched AS m LEFT JOIN changed AS c ON c.id = m.id CROSS JOIN notified`

// JobRunNow makes matching available jobs due at Now.
func (e *executor) JobRunNow(ctx context.Context, p *twicestore.JobBulkParams) (*twicestore.JobBulkResult, error) {
	res, err := e.bulk(ctx, "run jobs now", p.Filter, runNowSQL, []any{nowOr(p.Now), e.notify.channel},
		func(state twicetype.JobState, changed bool) twicestore.JobActionResult {
			if changed {
				return twicestore.JobActionResult{Status: twicestore.JobActionDone, State: twicetype.JobStateAvailable}
			}
			return twicestore.JobActionResult{Status: twicestore.JobActionWrongState, State: state}
		})
	if err == nil {
		e.floors.dropAll() // the jobs moved ahead of where the floors start
	}
	return res, err
}

// cancelSQL cancels the matched available and waiting jobs at once (a
// waiting job runs nowhere, so nothing has to stop first) and records the
// request on the matched running ones that have none yet (the first
// request is kept); PostgreSQL runs a data-modifying CTE whether or not the
// query reads it. notified sends the id of each matched running job on
// the cancel channel, delivered when the statement's transaction commits;
// joining it makes it run.
const cancelSQL = `WITH ` + matchedSQL + `,
cancelled AS (
	UPDATE twice_jobs AS j SET state = 'cancelled', finished_at = $1, lease_until = NULL,
		cancel_requested_at = $1, cancel_by = $2, cancel_reason = $3, note = $4
	FROM matched AS m WHERE j.id = m.id AND m.state IN ('available', 'waiting')
	RETURNING j.id
),
requested AS (
	UPDATE twice_jobs AS j SET cancel_requested_at = $1, cancel_by = $2, cancel_reason = $3
	FROM matched AS m WHERE j.id = m.id AND m.state = 'running' AND NOT m.cancel_asked
	RETURNING j.id
),
notified AS (
	SELECT count(pg_notify($5, m.id::text)) AS n FROM matched AS m WHERE m.state = 'running'
)
SELECT m.id, m.state, c.id IS NOT NULL OR m.state = 'running'
FROM matched AS m
CROSS JOIN notified
LEFT JOIN cancelled AS c ON c.id = m.id`

// JobCancel cancels matching available and waiting jobs at once, and records a cancel
// request on matching running ones (keeping the first request when there
// already is one) and notifies the cancel channel for them, so a
// ListenCancels on the node running each one learns at once; finished jobs
// are left alone.
func (e *executor) JobCancel(ctx context.Context, p *twicestore.JobCancelParams) (*twicestore.JobBulkResult, error) {
	note := (&twicetype.CancelRequest{By: p.By, Reason: p.Reason}).Note()
	return e.bulk(ctx, "cancel jobs", p.Filter, cancelSQL,
		[]any{nowOr(p.Now), p.By, p.Reason, note, e.notify.cancelChannel},
		func(state twicetype.JobState, _ bool) twicestore.JobActionResult {
			switch state {
			case twicetype.JobStateAvailable, twicetype.JobStateWaiting:
				return twicestore.JobActionResult{Status: twicestore.JobActionDone, State: twicetype.JobStateCancelled}
			case twicetype.JobStateRunning:
				return twicestore.JobActionResult{Status: twicestore.JobActionCancelRequested, State: state}
			}
			return twicestore.JobActionResult{Status: twicestore.JobActionAlreadyFinished, State: state}
		})
}

// deleteSQL deletes the matched jobs that are not running, and their
// waits' resolutions (signals), which nothing refers to once the job is
// gone.
const deleteSQL = `WITH ` + matchedSQL + `,
deleted AS (
	DELETE FROM twice_jobs AS j USING matched AS m WHERE j.id = m.id AND m.state <> 'running'
	RETURNING j.id
),
signals AS (
	DELETE FROM twice_signals WHERE job_id = ANY(ARRAY(SELECT id FROM deleted))
)
SELECT m.id, m.state, d.id IS NOT NULL FROM matched AS m LEFT JOIN deleted AS d ON d.id = m.id`

// JobDelete deletes matching jobs that are not running.
func (e *executor) JobDelete(ctx context.Context, p *twicestore.JobBulkParams) (*twicestore.JobBulkResult, error) {
	return e.bulk(ctx, "delete jobs", p.Filter, deleteSQL, nil,
		func(state twicetype.JobState, changed bool) twicestore.JobActionResult {
			if changed {
				return twicestore.JobActionResult{Status: twicestore.JobActionDone}
			}
			return twicestore.JobActionResult{Status: twicestore.JobActionWrongState, State: state}
		})
}
