package twicesqlite

// The operator's bulk actions on jobs (retry, discard, cancel, delete), each
// with a result per job. Each runs in one transaction: it reads the jobs the
// filter matches, then acts on each one under its own state guard, so one
// job the action does not apply to (a unique key taken, a job running)
// never stops the others.

import (
	"context"
	"fmt"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// bulk reads the jobs f matches, in id order, and calls act for each inside
// one transaction; act returns the job's result.
func (e *executor) bulk(ctx context.Context, what string, f twicestore.JobFilter,
	act func(q dbtx, j driverkit.MatchedJob) (twicestore.JobActionResult, error)) (*twicestore.JobBulkResult, error) {
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	var results []twicestore.JobActionResult
	err := e.inTx(ctx, func(q dbtx) error {
		where, args := filterSQL(f)
		rows, err := q.QueryContext(ctx, `SELECT `+driverkit.MatchedJobColumns+`
			FROM twice_jobs WHERE `+where+` ORDER BY id`, args...)
		if err != nil {
			return err
		}
		jobs, err := dbrows.Collect(rows, driverkit.ScanMatchedJob)
		if err != nil {
			return err
		}
		for _, j := range jobs {
			r, err := act(q, j)
			if err != nil {
				return fmt.Errorf("job %d: %w", j.ID, err)
			}
			r.ID = j.ID
			results = append(results, r)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return driverkit.FinishResults(f, results), nil
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
func (e *executor) JobRetry(ctx context.Context, p *twicestore.JobBulkParams) (*twicestore.JobBulkResult, error) {
	now := micros(nowOr(p.Now))
	return e.bulk(ctx, "retry jobs", p.Filter, func(q dbtx, j driverkit.MatchedJob) (twicestore.JobActionResult, error) {
		if !driverkit.RetryTakes(j.State, p.Completed, j.Composed) {
			return twicestore.JobActionResult{Status: driverkit.RetryStatus(j.State, p.Completed, j.Composed, false), State: j.State}, nil
		}
		if j.UniqueKey != "" {
			var holder int64
			err := q.QueryRowContext(ctx, `SELECT COALESCE(MIN(id), 0) FROM twice_jobs INDEXED BY twice_jobs_unique
				WHERE kind = ? AND unique_key = ? AND id <> ? AND `+driverkit.UniqueHeldSQL(""),
				j.Kind, j.UniqueKey, j.ID).Scan(&holder)
			if err != nil {
				return twicestore.JobActionResult{}, err
			}
			if holder != 0 {
				return twicestore.JobActionResult{Status: twicestore.JobActionConflict, State: j.State, HolderID: holder}, nil
			}
		}
		_, err := q.ExecContext(ctx, `UPDATE twice_jobs SET state = 'available', attempt = 0, run_at = ?,
			lease_until = NULL, finished_at = NULL, cancel_requested_at = NULL, cancel_by = '', cancel_reason = '',
			snoozes = 0 WHERE id = ?`, now, j.ID)
		if err != nil {
			return twicestore.JobActionResult{}, err
		}
		return twicestore.JobActionResult{Status: twicestore.JobActionDone, State: twicetype.JobStateAvailable}, nil
	})
}

// JobDiscard moves matching dead jobs to discarded, finished at Now.
func (e *executor) JobDiscard(ctx context.Context, p *twicestore.JobBulkParams) (*twicestore.JobBulkResult, error) {
	now := micros(nowOr(p.Now))
	return e.bulk(ctx, "discard jobs", p.Filter, func(q dbtx, j driverkit.MatchedJob) (twicestore.JobActionResult, error) {
		if j.State != twicetype.JobStateDead {
			return twicestore.JobActionResult{Status: twicestore.JobActionWrongState, State: j.State}, nil
		}
		if _, err := q.ExecContext(ctx, `UPDATE twice_jobs SET state = 'discarded', finished_at = ? WHERE id = ?`, now, j.ID); err != nil {
			return twicestore.JobActionResult{}, err
		}
		return twicestore.JobActionResult{Status: twicestore.JobActionDone, State: twicetype.JobStateDiscarded}, nil
	})
}

// JobRunNow makes matching available jobs due at Now; a job already due
// keeps its run time.
func (e *executor) JobRunNow(ctx context.Context, p *twicestore.JobBulkParams) (*twicestore.JobBulkResult, error) {
	now := micros(nowOr(p.Now))
	return e.bulk(ctx, "run jobs now", p.Filter, func(q dbtx, j driverkit.MatchedJob) (twicestore.JobActionResult, error) {
		if j.State != twicetype.JobStateAvailable {
			return twicestore.JobActionResult{Status: twicestore.JobActionWrongState, State: j.State}, nil
		}
		if _, err := q.ExecContext(ctx, `UPDATE twice_jobs SET run_at = min(run_at, ?) WHERE id = ?`, now, j.ID); err != nil {
			return twicestore.JobActionResult{}, err
		}
		return twicestore.JobActionResult{Status: twicestore.JobActionDone, State: twicetype.JobStateAvailable}, nil
	})
}

// JobCancel cancels matching available and waiting jobs at once (a
// waiting job runs no handler to tell) and records a cancel
// request on matching running ones (keeping the first request when there
// already is one); finished jobs are left alone.
func (e *executor) JobCancel(ctx context.Context, p *twicestore.JobCancelParams) (*twicestore.JobBulkResult, error) {
	now := micros(nowOr(p.Now))
	note := (&twicetype.CancelRequest{By: p.By, Reason: p.Reason}).Note()
	return e.bulk(ctx, "cancel jobs", p.Filter, func(q dbtx, j driverkit.MatchedJob) (twicestore.JobActionResult, error) {
		switch j.State {
		case twicetype.JobStateAvailable, twicetype.JobStateWaiting:
			_, err := q.ExecContext(ctx, `UPDATE twice_jobs SET state = 'cancelled', finished_at = ?1, lease_until = NULL,
				cancel_requested_at = ?1, cancel_by = ?2, cancel_reason = ?3, note = ?4 WHERE id = ?5`,
				now, p.By, p.Reason, note, j.ID)
			if err != nil {
				return twicestore.JobActionResult{}, err
			}
			return twicestore.JobActionResult{Status: twicestore.JobActionDone, State: twicetype.JobStateCancelled}, nil
		case twicetype.JobStateRunning:
			if !j.CancelAsked {
				_, err := q.ExecContext(ctx, `UPDATE twice_jobs SET cancel_requested_at = ?, cancel_by = ?, cancel_reason = ?
					WHERE id = ?`, now, p.By, p.Reason, j.ID)
				if err != nil {
					return twicestore.JobActionResult{}, err
				}
			}
			return twicestore.JobActionResult{Status: twicestore.JobActionCancelRequested, State: j.State}, nil
		}
		return twicestore.JobActionResult{Status: twicestore.JobActionAlreadyFinished, State: j.State}, nil
	})
}

// JobDelete deletes matching jobs that are not running; a waiting job is
// deleted too, and every job's signals go with it in the same statement
// (the trigger twice_jobs_signals_deleted of migration 019).
func (e *executor) JobDelete(ctx context.Context, p *twicestore.JobBulkParams) (*twicestore.JobBulkResult, error) {
	return e.bulk(ctx, "delete jobs", p.Filter, func(q dbtx, j driverkit.MatchedJob) (twicestore.JobActionResult, error) {
		if j.State == twicetype.JobStateRunning {
			return twicestore.JobActionResult{Status: twicestore.JobActionWrongState, State: j.State}, nil
		}
		if _, err := q.ExecContext(ctx, `DELETE FROM twice_jobs WHERE id = ?`, j.ID); err != nil {
			return twicestore.JobActionResult{}, err
		}
		return twicestore.JobActionResult{Status: twicestore.JobActionDone}, nil
	})
}
