package twicemysql

// The operator's bulk actions on jobs (retry, discard, cancel, delete), each
// with a result per job. Each runs in one transaction that first locks the
// jobs the filter matches, in id order (SELECT ... FOR UPDATE: two actions
// over the same jobs, or an action and a batch of outcomes, wait for each
// other), and reads their state as locked: a job a worker finished while
// the action waited is seen finished, and no worker can finish it between
// the read and the write. It then changes the jobs the action applies to,
// each UPDATE guarded by the state it was read in, so one job the action
// does not apply to (a unique key taken, a job running) never stops the
// others.

import (
	"context"
	"fmt"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// bulk locks the jobs f matches, in id order, and calls act with them
// inside one transaction; act returns a result per job, whose ids bulk
// fills in.
func (e *executor) bulk(ctx context.Context, what string, f twicestore.JobFilter,
	act func(q dbtx, jobs []driverkit.MatchedJob) ([]twicestore.JobActionResult, error)) (*twicestore.JobBulkResult, error) {
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	var results []twicestore.JobActionResult
	err := e.inTx(ctx, func(q dbtx) error {
		where, args := filterSQL(f)
		rows, err := q.QueryContext(ctx, `SELECT `+driverkit.MatchedJobColumns+`
			FROM twice_jobs WHERE `+where+` ORDER BY id FOR UPDATE`, args...)
		if err != nil {
			return err
		}
		jobs, err := dbrows.Collect(rows, driverkit.ScanMatchedJob)
		if err != nil {
			return err
		}
		results, err = act(q, jobs)
		if err != nil {
			return err
		}
		for i := range results {
			results[i].ID = jobs[i].ID
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return driverkit.FinishResults(f, results), nil
}

// idsWhere returns the ids of the jobs for which keep is true.
func idsWhere(jobs []driverkit.MatchedJob, keep func(j driverkit.MatchedJob) bool) []int64 {
	var ids []int64
	for _, j := range jobs {
		if keep(j) {
			ids = append(ids, j.ID)
		}
	}
	return ids
}

// execIn runs query, whose one %s becomes the IN list of ids, with the
// arguments before followed by the ids; it does nothing for no ids.
func execIn(ctx context.Context, q dbtx, query string, before []any, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	list, idArgs := in(ids)
	args := append(append([]any{}, before...), idArgs...)
	_, err := q.ExecContext(ctx, fmt.Sprintf(query, list), args...)
	return err
}

// JobRetry moves matching dead, discarded or cancelled jobs (and completed
// ones with p.Completed, but for workflow tasks and batch members) back to
// available, due at Now, with their attempts reset, their cancel request
// cleared and their error history kept. The lease epoch is never reset: it
// must only grow for fencing to hold. A unique job whose key another job of
// its kind holds (one enqueued after it finished, a finished one holding
// its key in one of its unique states, or one this call retried first) is
// left as it is, with a conflict result naming the holder. A retried job is
// available, which every job's unique states include, so it always takes
// its key back; no other change of state can move a job into holding its
// key (see twicetype.UniqueStates.Validate).
//
// The jobs without a unique key are retried in one UPDATE. The others go
// one by one, in id order, each after a look-up of its key's holder by the
// unique index (kind, unique_holder); a holder committed by another
// transaction after that look-up makes the UPDATE fail on the unique
// index, which in InnoDB undoes that one statement only, and the job is
// reported in conflict with the holder found then.
func (e *executor) JobRetry(ctx context.Context, p *twicestore.JobBulkParams) (*twicestore.JobBulkResult, error) {
	now := dbTime(nowOr(p.Now))
	const retrySet = `UPDATE twice_jobs SET state = 'available', attempt = 0, run_at = ?,
		lease_until = NULL, finished_at = NULL, cancel_requested_at = NULL, cancel_by = '', cancel_reason = '',
		snoozes = 0 WHERE id IN %s AND state IN ('dead', 'discarded', 'cancelled', 'completed')`
	return e.bulk(ctx, "retry jobs", p.Filter, func(q dbtx, jobs []driverkit.MatchedJob) ([]twicestore.JobActionResult, error) {
		takes := func(j driverkit.MatchedJob) bool { return driverkit.RetryTakes(j.State, p.Completed, j.Composed) }
		plain := idsWhere(jobs, func(j driverkit.MatchedJob) bool { return takes(j) && j.UniqueKey == "" })
		if err := execIn(ctx, q, retrySet, []any{now}, plain); err != nil {
			return nil, err
		}
		results := make([]twicestore.JobActionResult, len(jobs))
		for i, j := range jobs {
			switch {
			case !takes(j):
				results[i] = twicestore.JobActionResult{Status: driverkit.RetryStatus(j.State, p.Completed, j.Composed, false), State: j.State}
				continue
			case j.UniqueKey == "":
				results[i] = twicestore.JobActionResult{Status: twicestore.JobActionDone, State: twicetype.JobStateAvailable}
				continue
			}
			holder, err := uniqueHolder(ctx, q, j)
			if err == nil && holder == 0 {
				err = execIn(ctx, q, retrySet, []any{now}, []int64{j.ID})
				if isUniqueViolation(err) {
					holder, err = uniqueHolder(ctx, q, j)
				}
			}
			if err != nil {
				return nil, fmt.Errorf("job %d: %w", j.ID, err)
			}
			if holder != 0 {
				results[i] = twicestore.JobActionResult{Status: twicestore.JobActionConflict, State: j.State, HolderID: holder}
				continue
			}
			results[i] = twicestore.JobActionResult{Status: twicestore.JobActionDone, State: twicetype.JobStateAvailable}
		}
		return results, nil
	})
}

// uniqueHolder returns the job other than j that holds j's unique key, or
// 0: unique_holder is the key while driverkit.UniqueHeldSQL holds for the
// row, and NULL otherwise, so the unique index (kind, unique_holder) finds
// the holder in one look-up.
func uniqueHolder(ctx context.Context, q dbtx, j driverkit.MatchedJob) (int64, error) {
	var holder int64
	err := q.QueryRowContext(ctx, `SELECT COALESCE(MIN(id), 0) FROM twice_jobs
		WHERE kind = ? AND unique_holder = ? AND id <> ?`, j.Kind, j.UniqueKey, j.ID).Scan(&holder)
	return holder, err
}

// JobDiscard moves matching dead jobs to discarded, finished at Now.
func (e *executor) JobDiscard(ctx context.Context, p *twicestore.JobBulkParams) (*twicestore.JobBulkResult, error) {
	now := dbTime(nowOr(p.Now))
	return e.bulk(ctx, "discard jobs", p.Filter, func(q dbtx, jobs []driverkit.MatchedJob) ([]twicestore.JobActionResult, error) {
		dead := func(j driverkit.MatchedJob) bool { return j.State == twicetype.JobStateDead }
		err := execIn(ctx, q, `UPDATE twice_jobs SET state = 'discarded', finished_at = ? WHERE id IN %s AND state = 'dead'`,
			[]any{now}, idsWhere(jobs, dead))
		if err != nil {
			return nil, err
		}
		return resultsOf(jobs, func(j driverkit.MatchedJob) twicestore.JobActionResult {
			if dead(j) {
				return twicestore.JobActionResult{Status: twicestore.JobActionDone, State: twicetype.JobStateDiscarded}
			}
			return twicestore.JobActionResult{Status: twicestore.JobActionWrongState, State: j.State}
		}), nil
	})
}

// resultsOf is the result of each job, as decide says.
func resultsOf(jobs []driverkit.MatchedJob, decide func(j driverkit.MatchedJob) twicestore.JobActionResult) []twicestore.JobActionResult {
	results := make([]twicestore.JobActionResult, len(jobs))
	for i, j := range jobs {
		results[i] = decide(j)
	}
	return results
}

// JobRunNow makes matching available jobs due at Now; a job already due
// keeps its run time.
func (e *executor) JobRunNow(ctx context.Context, p *twicestore.JobBulkParams) (*twicestore.JobBulkResult, error) {
	now := dbTime(nowOr(p.Now))
	return e.bulk(ctx, "run jobs now", p.Filter, func(q dbtx, jobs []driverkit.MatchedJob) ([]twicestore.JobActionResult, error) {
		available := func(j driverkit.MatchedJob) bool { return j.State == twicetype.JobStateAvailable }
		err := execIn(ctx, q, `UPDATE twice_jobs SET run_at = LEAST(run_at, ?) WHERE id IN %s AND state = 'available'`,
			[]any{now}, idsWhere(jobs, available))
		if err != nil {
			return nil, err
		}
		return resultsOf(jobs, func(j driverkit.MatchedJob) twicestore.JobActionResult {
			if available(j) {
				return twicestore.JobActionResult{Status: twicestore.JobActionDone, State: twicetype.JobStateAvailable}
			}
			return twicestore.JobActionResult{Status: twicestore.JobActionWrongState, State: j.State}
		}), nil
	})
}

// JobCancel cancels matching available and waiting jobs at once (a
// waiting job runs no handler to tell) and records a cancel request on
// matching running ones (keeping the first request when there already is
// one); finished jobs are left alone. The node running a job learns of the
// request by its cancel poll or at its next lease extension.
func (e *executor) JobCancel(ctx context.Context, p *twicestore.JobCancelParams) (*twicestore.JobBulkResult, error) {
	now := dbTime(nowOr(p.Now))
	note := (&twicetype.CancelRequest{By: p.By, Reason: p.Reason}).Note()
	return e.bulk(ctx, "cancel jobs", p.Filter, func(q dbtx, jobs []driverkit.MatchedJob) ([]twicestore.JobActionResult, error) {
		unstarted := func(j driverkit.MatchedJob) bool {
			return j.State == twicetype.JobStateAvailable || j.State == twicetype.JobStateWaiting
		}
		err := execIn(ctx, q, `UPDATE twice_jobs SET state = 'cancelled', finished_at = ?, lease_until = NULL,
			cancel_requested_at = ?, cancel_by = ?, cancel_reason = ?, note = ?
			WHERE id IN %s AND state IN ('available', 'waiting')`,
			[]any{now, now, p.By, p.Reason, note}, idsWhere(jobs, unstarted))
		if err != nil {
			return nil, err
		}
		err = execIn(ctx, q, `UPDATE twice_jobs SET cancel_requested_at = ?, cancel_by = ?, cancel_reason = ?
			WHERE id IN %s AND state = 'running' AND cancel_requested_at IS NULL`,
			[]any{now, p.By, p.Reason}, idsWhere(jobs, func(j driverkit.MatchedJob) bool {
				return j.State == twicetype.JobStateRunning && !j.CancelAsked
			}))
		if err != nil {
			return nil, err
		}
		return resultsOf(jobs, func(j driverkit.MatchedJob) twicestore.JobActionResult {
			switch {
			case unstarted(j):
				return twicestore.JobActionResult{Status: twicestore.JobActionDone, State: twicetype.JobStateCancelled}
			case j.State == twicetype.JobStateRunning:
				return twicestore.JobActionResult{Status: twicestore.JobActionCancelRequested, State: j.State}
			}
			return twicestore.JobActionResult{Status: twicestore.JobActionAlreadyFinished, State: j.State}
		}), nil
	})
}

// JobDelete deletes matching jobs that are not running; a waiting job is
// deleted too, and every job's waits' resolutions (twice_signals) go with
// it in the same statement (the trigger twice_jobs_composition_deleted of
// migration 002).
func (e *executor) JobDelete(ctx context.Context, p *twicestore.JobBulkParams) (*twicestore.JobBulkResult, error) {
	return e.bulk(ctx, "delete jobs", p.Filter, func(q dbtx, jobs []driverkit.MatchedJob) ([]twicestore.JobActionResult, error) {
		notRunning := func(j driverkit.MatchedJob) bool { return j.State != twicetype.JobStateRunning }
		err := execIn(ctx, q, `DELETE FROM twice_jobs WHERE id IN %s AND state <> 'running'`, nil, idsWhere(jobs, notRunning))
		if err != nil {
			return nil, err
		}
		return resultsOf(jobs, func(j driverkit.MatchedJob) twicestore.JobActionResult {
			if notRunning(j) {
				return twicestore.JobActionResult{Status: twicestore.JobActionDone}
			}
			return twicestore.JobActionResult{Status: twicestore.JobActionWrongState, State: j.State}
		}), nil
	})
}
