package twicesqlite

// Named steps with receipts (twice.Step) and job output.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// fenceSQL holds when job ?1 is running under epoch ?2. Each step write
// checks it in the transaction that writes, and SQLite has one writer at a
// time, so no rescue or new lease can come in between.
const fenceSQL = `SELECT EXISTS (SELECT 1 FROM twice_jobs WHERE id = ? AND epoch = ? AND state = 'running')`

// StepGet returns one step or ErrNotFound.
func (e *executor) StepGet(ctx context.Context, p *twicestore.StepParams) (*twicetype.Step, error) {
	return stepGet(ctx, e.db, p)
}

func stepGet(ctx context.Context, q dbtx, p *twicestore.StepParams) (*twicetype.Step, error) {
	s, err := driverkit.StepRow(driverkit.MicrosTimes, p.Handler, p.Key)(q.QueryRowContext(ctx,
		`SELECT `+driverkit.StepColumns+` FROM twice_steps WHERE handler = ? AND key = ? AND step = ?`, p.Handler, p.Key, p.Step))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, twicestore.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get step %q of %q/%q: %w", p.Step, p.Handler, p.Key, err)
	}
	return s, nil
}

// fenced checks the fence of p in q.
func fenced(ctx context.Context, q dbtx, p *twicestore.StepParams) error {
	var ok bool
	if err := q.QueryRowContext(ctx, fenceSQL, p.JobID, p.Epoch).Scan(&ok); err != nil {
		return fmt.Errorf("step %q of %q/%q: check the job's lease: %w", p.Step, p.Handler, p.Key, err)
	}
	if !ok {
		return fmt.Errorf("step %q of %q/%q: job %d is no longer running under lease epoch %d: %w",
			p.Step, p.Handler, p.Key, p.JobID, p.Epoch, twicestore.ErrFenced)
	}
	return nil
}

// StepClaim claims a step under the job's fence; a step already claimed
// is returned whatever the fence.
func (e *executor) StepClaim(ctx context.Context, p *twicestore.StepParams) (*twicestore.StepClaimResult, error) {
	if err := p.CheckStep(); err != nil {
		return nil, err
	}
	res := &twicestore.StepClaimResult{}
	err := e.inTx(ctx, func(q dbtx) error {
		// A step that exists is returned even to a stale holder, since
		// reading it writes nothing (a redelivery of a finished job gets
		// its receipts back).
		ex, err := stepGet(ctx, q, p)
		if err == nil {
			res.Existing = ex
			return nil
		}
		if !errors.Is(err, twicestore.ErrNotFound) {
			return err
		}
		if err := fenced(ctx, q, p); err != nil {
			return err
		}
		now := micros(nowOr(p.Now))
		var done any
		if p.Done {
			done = now
		}
		r, err := q.ExecContext(ctx, `INSERT INTO twice_steps (handler, key, step, strategy, claimed_at, done_at, receipt, job_id, epoch)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (handler, key, step) DO NOTHING`,
			p.Handler, p.Key, p.Step, p.Strategy, now, done, outputArg(p.Receipt), p.JobID, p.Epoch)
		if err != nil {
			return fmt.Errorf("claim step %q of %q/%q: %w", p.Step, p.Handler, p.Key, err)
		}
		if n, err := r.RowsAffected(); err != nil || n == 1 {
			res.Claimed = err == nil
			return err
		}
		res.Existing, err = stepGet(ctx, q, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
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
		r, err := q.ExecContext(ctx, `UPDATE twice_steps SET done_at = ?, receipt = ?
			WHERE handler = ? AND key = ? AND step = ? AND job_id = ? AND epoch = ? AND done_at IS NULL`,
			micros(nowOr(p.Now)), outputArg(p.Receipt), p.Handler, p.Key, p.Step, p.JobID, p.Epoch)
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
		if _, err := q.ExecContext(ctx, `DELETE FROM twice_steps
			WHERE handler = ? AND key = ? AND step = ? AND job_id = ? AND epoch = ? AND done_at IS NULL`,
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
	var n, jobID int64
	err := e.direct(ctx, func(q dbtx) error {
		var r sql.Result
		var err error
		if p.Receipt != nil {
			r, err = q.ExecContext(ctx, `UPDATE twice_steps AS s SET done_at = ?, receipt = ?
				WHERE handler = ? AND key = ? AND step = ? AND done_at IS NULL AND `+claimantNotRunningSQL,
				micros(nowOr(p.Now)), string(p.Receipt), p.Handler, p.Key, p.Step)
		} else {
			r, err = q.ExecContext(ctx, `DELETE FROM twice_steps AS s
				WHERE handler = ? AND key = ? AND step = ? AND done_at IS NULL AND `+claimantNotRunningSQL,
				p.Handler, p.Key, p.Step)
		}
		if err != nil {
			return err
		}
		if n, err = r.RowsAffected(); err != nil || n == 1 {
			return err
		}
		// Nothing settled: no unfinished claim, or its job is running.
		err = q.QueryRowContext(ctx, `SELECT job_id FROM twice_steps
			WHERE handler = ? AND key = ? AND step = ? AND done_at IS NULL`, p.Handler, p.Key, p.Step).Scan(&jobID)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	switch {
	case err != nil:
		return fmt.Errorf("settle step %q of %q/%q: %w", p.Step, p.Handler, p.Key, err)
	case n == 1:
		return nil
	case jobID != 0:
		return fmt.Errorf("settle step %q of %q/%q: job %d, which claimed it, is running: %w",
			p.Step, p.Handler, p.Key, jobID, twicestore.ErrStepRunning)
	}
	return fmt.Errorf("settle step %q of %q/%q: no unfinished claim: %w", p.Step, p.Handler, p.Key, twicestore.ErrNotFound)
}

// claimantNotRunningSQL holds when the job that claimed step s is not
// running: a running delivery may be in the step's effect, so a person's
// settle must wait until it ends.
const claimantNotRunningSQL = `NOT EXISTS (SELECT 1 FROM twice_jobs j WHERE j.id = s.job_id AND j.state = 'running')`

// StepPrune deletes up to Limit of the oldest steps claimed before Before.
func (e *executor) StepPrune(ctx context.Context, p *twicestore.MarkerPruneParams) (*twicestore.MarkerPruneResult, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = -1
	}
	res := &twicestore.MarkerPruneResult{}
	err := e.direct(ctx, func(q dbtx) (err error) {
		res.Deleted, res.From, err = pruneFrom(ctx, q, `DELETE FROM twice_steps WHERE (handler, key, step) IN (
			SELECT handler, key, step FROM twice_steps WHERE claimed_at < ? AND claimed_at >= ? ORDER BY claimed_at LIMIT ?)
			RETURNING claimed_at`, p.Before, p.From, limit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("prune steps: %w", err)
	}
	return res, nil
}

// JobOutput returns a job's state and output.
func (e *executor) JobOutput(ctx context.Context, p *twicestore.JobGetParams) (*twicestore.JobOutputResult, error) {
	res := &twicestore.JobOutputResult{}
	var state string
	var output sql.NullString
	err := e.db.QueryRowContext(ctx, `SELECT state, output, note,
		coalesce(errors ->> '$[#-1].error', '')
		FROM twice_jobs WHERE id = ?`, p.ID).Scan(&state, &output, &res.Note, &res.Error)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("job %d: %w", p.ID, twicestore.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read output of job %d: %w", p.ID, err)
	}
	res.State = twicetype.JobState(state)
	if output.Valid {
		res.Output = []byte(output.String)
	}
	return res, nil
}

// outputArg is a JSON document as a nullable text argument.
func outputArg(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}
