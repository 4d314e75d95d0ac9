package twicemysql

// Named steps with receipts (twice.Step) and job output.

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

// fenceSQL finds job ? running under epoch ?. With lockShared it keeps
// that true until the transaction ends: a rescue or a new lease (which
// update the job's row) waits for the step's transaction to commit instead
// of slipping in between the check and the commit.
const fenceSQL = `SELECT 1 FROM twice_jobs WHERE id = ? AND epoch = ? AND state = 'running'`

// scanStep reads one row of driverkit.StepColumns into a step of handler
// and key.
func scanStep(r dbrows.Scanner, handler, key string) (*twicetype.Step, error) {
	return driverkit.StepRow(driverkit.NativeTimes, handler, key)(r)
}

// StepGet returns one step or ErrNotFound.
func (e *executor) StepGet(ctx context.Context, p *twicestore.StepParams) (*twicetype.Step, error) {
	s, err := stepGet(ctx, e.db, p, "")
	if err != nil && !errors.Is(err, twicestore.ErrNotFound) {
		return nil, mapError(err)
	}
	return s, err
}

// stepGet reads one step in q, or returns ErrNotFound; lock is appended to
// the SELECT ("" or lockShared).
func stepGet(ctx context.Context, q dbtx, p *twicestore.StepParams, lock string) (*twicetype.Step, error) {
	s, err := scanStep(q.QueryRowContext(ctx, "SELECT "+driverkit.StepColumns+" FROM twice_steps WHERE handler = ? AND `key` = ? AND step = ?"+lock,
		p.Handler, p.Key, p.Step), p.Handler, p.Key)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, twicestore.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get step %q of %q/%q: %w", p.Step, p.Handler, p.Key, err)
	}
	return s, nil
}

// StepList lists the steps of one handler and key, by step name, read by
// the primary key.
func (e *executor) StepList(ctx context.Context, p *twicestore.StepListParams) (*twicestore.StepListResult, error) {
	query, args := "SELECT "+driverkit.StepColumns+" FROM twice_steps WHERE handler = ? AND `key` = ? ORDER BY step", []any{p.Handler, p.Key}
	if p.Limit > 0 {
		query, args = query+" LIMIT ?", append(args, p.Limit)
	}
	rows, err := e.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list steps of %q/%q: %w", p.Handler, p.Key, mapError(err))
	}
	steps, err := dbrows.Collect(rows, driverkit.StepRow(driverkit.NativeTimes, p.Handler, p.Key))
	if err != nil {
		return nil, fmt.Errorf("list steps of %q/%q: %w", p.Handler, p.Key, mapError(err))
	}
	return &twicestore.StepListResult{Steps: steps}, nil
}

// fenced checks, in q, that p's job is running under p's epoch, holding a
// shared lock on the job's row until q's transaction ends unless
// p.FenceWithoutLock says the transaction goes on working (a held row
// would stop the job's heartbeats, which update it).
func fenced(ctx context.Context, q dbtx, p *twicestore.StepParams) error {
	query := fenceSQL + lockShared
	if p.FenceWithoutLock {
		query = fenceSQL
	}
	var one int
	err := q.QueryRowContext(ctx, query, p.JobID, p.Epoch).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fenceErr(p)
	}
	if err != nil {
		return fmt.Errorf("step %q of %q/%q: check the job's lease: %w", p.Step, p.Handler, p.Key, err)
	}
	return nil
}

// fenceErr is the error of a step write whose delivery no longer holds
// the job.
func fenceErr(p *twicestore.StepParams) error {
	return fmt.Errorf("step %q of %q/%q: job %d is no longer running under lease epoch %d: %w",
		p.Step, p.Handler, p.Key, p.JobID, p.Epoch, twicestore.ErrFenced)
}

// StepClaim claims a step under the job's fence; a step already claimed
// is returned whatever the fence.
//
// The primary key settles concurrent claims: an INSERT that meets a claim
// another transaction has not committed waits for it, and fails with a
// duplicate key error once it commits (which leaves the transaction
// usable, and a shared lock on the claim found).
func (e *executor) StepClaim(ctx context.Context, p *twicestore.StepParams) (*twicestore.StepClaimResult, error) {
	if err := p.CheckStep(); err != nil {
		return nil, err
	}
	res := &twicestore.StepClaimResult{}
	err := e.inTx(ctx, func(q dbtx) error {
		*res = twicestore.StepClaimResult{} // inTx may run this again
		// A step that exists is returned even to a stale holder, since
		// reading it writes nothing (a redelivery of a finished job gets
		// its receipts back).
		existing, err := stepGet(ctx, q, p, "")
		if err == nil {
			res.Existing = existing
			return nil
		}
		if !errors.Is(err, twicestore.ErrNotFound) {
			return err
		}
		if err := fenced(ctx, q, p); err != nil {
			return err
		}
		now := dbTime(nowOr(p.Now))
		var done any
		if p.Done {
			done = now
		}
		_, err = q.ExecContext(ctx, "INSERT INTO twice_steps (handler, `key`, step, strategy, claimed_at, done_at, receipt, job_id, epoch)"+
			" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
			p.Handler, p.Key, p.Step, p.Strategy, now, done, receiptArg(p.Receipt), p.JobID, p.Epoch)
		if err == nil {
			res.Claimed = true
			return nil
		}
		if !isUniqueViolation(err) {
			return fmt.Errorf("claim step %q of %q/%q: %w", p.Step, p.Handler, p.Key, err)
		}
		// Claimed meanwhile by another transaction, now committed: read
		// it with a locking read, which sees it whatever the isolation
		// (released in between, it reads as a claim without details).
		res.Existing, err = stepGet(ctx, q, p, lockShared)
		if errors.Is(err, twicestore.ErrNotFound) {
			res.Existing, err = &twicetype.Step{Handler: p.Handler, Key: p.Key, Step: p.Step, Strategy: p.Strategy}, nil
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// receiptArg is a receipt as a nullable argument.
func receiptArg(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

// StepComplete stores the receipt of this delivery's claim.
func (e *executor) StepComplete(ctx context.Context, p *twicestore.StepParams) error {
	if err := p.CheckStep(); err != nil {
		return err
	}
	return e.inTx(ctx, func(q dbtx) error {
		if err := fenced(ctx, q, p); err != nil {
			return err
		}
		// done_at goes from NULL to a time, so the row always changes and
		// the count is the same whether the connection counts the rows
		// changed (the default) or found (clientFoundRows).
		r, err := q.ExecContext(ctx, "UPDATE twice_steps SET done_at = ?, receipt = ?"+
			" WHERE handler = ? AND `key` = ? AND step = ? AND job_id = ? AND epoch = ? AND done_at IS NULL",
			dbTime(nowOr(p.Now)), receiptArg(p.Receipt), p.Handler, p.Key, p.Step, p.JobID, p.Epoch)
		if err != nil {
			return fmt.Errorf("complete step %q of %q/%q: %w", p.Step, p.Handler, p.Key, err)
		}
		if n, err := r.RowsAffected(); err != nil || n == 0 {
			return fmt.Errorf("complete step %q of %q/%q: job %d epoch %d holds no unfinished claim of it: %w",
				p.Step, p.Handler, p.Key, p.JobID, p.Epoch, twicestore.ErrNotFound)
		}
		return nil
	})
}

// StepRelease deletes this delivery's unfinished claim.
func (e *executor) StepRelease(ctx context.Context, p *twicestore.StepParams) error {
	if err := p.CheckStep(); err != nil {
		return err
	}
	return e.inTx(ctx, func(q dbtx) error {
		if err := fenced(ctx, q, p); err != nil {
			return err
		}
		if _, err := q.ExecContext(ctx, "DELETE FROM twice_steps"+
			" WHERE handler = ? AND `key` = ? AND step = ? AND job_id = ? AND epoch = ? AND done_at IS NULL",
			p.Handler, p.Key, p.Step, p.JobID, p.Epoch); err != nil {
			return fmt.Errorf("release step %q of %q/%q: %w", p.Step, p.Handler, p.Key, err)
		}
		return nil
	})
}

// StepSettle settles an unfinished claim: done with the receipt, or
// deleted without one; never the claim of a job that is running.
func (e *executor) StepSettle(ctx context.Context, p *twicestore.StepParams) error {
	if err := p.CheckSettle(); err != nil {
		return err
	}
	var r sql.Result
	var err error
	if p.Receipt != nil {
		// done_at goes from NULL to a time: the row always changes.
		r, err = e.db.ExecContext(ctx, "UPDATE twice_steps AS s SET done_at = ?, receipt = ?"+
			" WHERE handler = ? AND `key` = ? AND step = ? AND done_at IS NULL AND "+claimantNotRunningSQL,
			dbTime(nowOr(p.Now)), p.Receipt, p.Handler, p.Key, p.Step)
	} else {
		// DELETE s FROM, the multiple-table form: MariaDB's single-table
		// DELETE takes no alias.
		r, err = e.db.ExecContext(ctx, "DELETE s FROM twice_steps AS s"+
			" WHERE handler = ? AND `key` = ? AND step = ? AND done_at IS NULL AND "+claimantNotRunningSQL,
			p.Handler, p.Key, p.Step)
	}
	var n int64
	if err == nil {
		n, err = r.RowsAffected()
	}
	switch {
	case err != nil:
		return fmt.Errorf("settle step %q of %q/%q: %w", p.Step, p.Handler, p.Key, mapError(err))
	case n == 1:
		return nil
	}
	// Nothing settled: no unfinished claim, or its job is running.
	var jobID int64
	err = e.db.QueryRowContext(ctx, "SELECT job_id FROM twice_steps WHERE handler = ? AND `key` = ? AND step = ? AND done_at IS NULL",
		p.Handler, p.Key, p.Step).Scan(&jobID)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("settle step %q of %q/%q: no unfinished claim: %w", p.Step, p.Handler, p.Key, twicestore.ErrNotFound)
	case err != nil:
		return fmt.Errorf("settle step %q of %q/%q: %w", p.Step, p.Handler, p.Key, mapError(err))
	}
	return fmt.Errorf("settle step %q of %q/%q: job %d, which claimed it, is running: %w",
		p.Step, p.Handler, p.Key, jobID, twicestore.ErrStepRunning)
}

// claimantNotRunningSQL holds when the job that claimed step s is not
// running: a running delivery may be in the step's effect, so a person's
// settle must wait until it ends.
const claimantNotRunningSQL = `NOT EXISTS (SELECT 1 FROM twice_jobs j WHERE j.id = s.job_id AND j.state = 'running')`

// StepPrune deletes up to Limit of the oldest steps claimed before Before;
// a Limit of zero or less deletes them all.
func (e *executor) StepPrune(ctx context.Context, p *twicestore.MarkerPruneParams) (*twicestore.MarkerPruneResult, error) {
	n, from, err := e.pruneFrom(ctx, stepPrune, p.Before, p.From, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("prune steps: %w", err)
	}
	return &twicestore.MarkerPruneResult{Deleted: n, From: from}, nil
}

// JobOutput returns a job's state and output, and the last attempt's
// error. The error is read by its index (JSON_LENGTH - 1): MariaDB before
// 10.9 has no $[last] path.
func (e *executor) JobOutput(ctx context.Context, p *twicestore.JobGetParams) (*twicestore.JobOutputResult, error) {
	res := &twicestore.JobOutputResult{}
	var state string
	var output []byte
	err := e.db.QueryRowContext(ctx, `SELECT state, output, note,
		CASE WHEN JSON_LENGTH(errors) > 0
			THEN COALESCE(JSON_UNQUOTE(JSON_EXTRACT(errors, CONCAT('$[', JSON_LENGTH(errors) - 1, '].error'))), '')
			ELSE '' END
		FROM twice_jobs WHERE id = ?`, p.ID).Scan(&state, &output, &res.Note, &res.Error)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("job %d: %w", p.ID, twicestore.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read output of job %d: %w", p.ID, mapError(err))
	}
	res.State = twicetype.JobState(state)
	res.Output = output
	return res, nil
}
