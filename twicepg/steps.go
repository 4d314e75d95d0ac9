package twicepg

// Named steps with receipts (twice.Step), job output and the awaited-job
// notifications of Client.Wait.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// finishedChannel carries the finish of awaited jobs, as "schema:id". One
// channel serves every schema (the trigger cannot hash a long schema name
// as channelFor does); awaited jobs are few, so listeners skip the others'
// payloads cheaply.
const finishedChannel = "twice_finished"

// fenceSQL holds when job $1 is running under epoch $2. FOR SHARE keeps it
// true until the statement's transaction ends: a rescue or a new lease
// waits for a step's transaction to commit instead of slipping in between
// the check and the commit. It is taken at the step's last write only, so
// a long transactional step does not hold up its job's heartbeats.
const fenceSQL = `SELECT 1 FROM twice_jobs WHERE id = $1 AND epoch = $2 AND state = 'running' FOR SHARE`

// fenceNoLockSQL is fenceSQL without the lock, for writes whose fence is
// checked again later in their transaction (StepParams.FenceWithoutLock).
const fenceNoLockSQL = `SELECT 1 FROM twice_jobs WHERE id = $1 AND epoch = $2 AND state = 'running'`

// fenceFor returns the fence a write of p uses.
func fenceFor(p *twicestore.StepParams) string {
	if p.FenceWithoutLock {
		return fenceNoLockSQL
	}
	return fenceSQL
}

// stepClaimSQL inserts the claim only when the fence holds, and reports
// whether the fence held and whether it inserted. ON CONFLICT waits for a
// concurrent claim of the same step to commit or roll back. The fence
// (fenceFor) goes in at %s.
const stepClaimSQL = `WITH fence AS (%s),
ins AS (
	INSERT INTO twice_steps (handler, key, step, strategy, claimed_at, done_at, receipt, job_id, epoch)
	SELECT $3, $4, $5, $6, $7, CASE WHEN $8::boolean THEN $7::timestamptz END, $9, $1, $2 FROM fence
	ON CONFLICT (handler, key, step) DO NOTHING
	RETURNING 1
)
SELECT (SELECT count(*) FROM fence), (SELECT count(*) FROM ins)`

// StepGet returns one step or ErrNotFound.
func (e *executor) StepGet(ctx context.Context, p *twicestore.StepParams) (*twicetype.Step, error) {
	s, err := driverkit.StepRow(driverkit.NativeTimes, p.Handler, p.Key)(e.q.queryRow(ctx,
		`SELECT `+driverkit.StepColumns+` FROM twice_steps WHERE handler = $1 AND key = $2 AND step = $3`, p.Handler, p.Key, p.Step))
	if isNoRows(err) {
		return nil, twicestore.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get step %q of %q/%q: %w", p.Step, p.Handler, p.Key, err)
	}
	return s, nil
}

// StepClaim claims a step under the job's fence; a step already claimed
// is returned whatever the fence.
func (e *executor) StepClaim(ctx context.Context, p *twicestore.StepParams) (*twicestore.StepClaimResult, error) {
	if err := p.CheckStep(); err != nil {
		return nil, err
	}
	var fenced, inserted int64
	if err := e.q.queryRow(ctx, fmt.Sprintf(stepClaimSQL, fenceFor(p)), p.JobID, p.Epoch, p.Handler, p.Key, p.Step, p.Strategy,
		nowOr(p.Now), p.Done, receiptArg(p.Receipt)).Scan(&fenced, &inserted); err != nil {
		return nil, fmt.Errorf("claim step %q of %q/%q: %w", p.Step, p.Handler, p.Key, err)
	}
	if inserted == 1 {
		return &twicestore.StepClaimResult{Claimed: true}, nil
	}
	// Not inserted: the step exists, or the fence failed. A step that
	// exists is returned even to a stale holder, since reading it writes
	// nothing (a redelivery of a finished job gets its receipts back).
	existing, err := e.StepGet(ctx, p)
	switch {
	case errors.Is(err, twicestore.ErrNotFound) && fenced == 0:
		return nil, fenceErr(p)
	case errors.Is(err, twicestore.ErrNotFound): // released in between: a claim without details
		existing, err = &twicetype.Step{Handler: p.Handler, Key: p.Key, Step: p.Step, Strategy: p.Strategy}, nil
	}
	if err != nil {
		return nil, err
	}
	return &twicestore.StepClaimResult{Existing: existing}, nil
}

func fenceErr(p *twicestore.StepParams) error {
	return fmt.Errorf("step %q of %q/%q: job %d is no longer running under lease epoch %d: %w",
		p.Step, p.Handler, p.Key, p.JobID, p.Epoch, twicestore.ErrFenced)
}

// receiptArg is a receipt as a nullable text argument.
func receiptArg(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

// StepComplete stores the receipt of this delivery's claim.
func (e *executor) StepComplete(ctx context.Context, p *twicestore.StepParams) error {
	if err := p.CheckStep(); err != nil {
		return err
	}
	var fenced, updated int64
	err := e.q.queryRow(ctx, `WITH fence AS (`+fenceFor(p)+`),
upd AS (
	UPDATE twice_steps SET done_at = $6, receipt = $7
	WHERE handler = $3 AND key = $4 AND step = $5 AND job_id = $1 AND epoch = $2 AND done_at IS NULL
		AND EXISTS (SELECT 1 FROM fence)
	RETURNING 1
)
SELECT (SELECT count(*) FROM fence), (SELECT count(*) FROM upd)`,
		p.JobID, p.Epoch, p.Handler, p.Key, p.Step, nowOr(p.Now), receiptArg(p.Receipt)).Scan(&fenced, &updated)
	switch {
	case err != nil:
		return fmt.Errorf("complete step %q of %q/%q: %w", p.Step, p.Handler, p.Key, err)
	case fenced == 0:
		return fenceErr(p)
	case updated == 0:
		return fmt.Errorf("complete step %q of %q/%q: job %d epoch %d holds no unfinished claim of it: %w",
			p.Step, p.Handler, p.Key, p.JobID, p.Epoch, twicestore.ErrNotFound)
	}
	return nil
}

// StepRelease deletes this delivery's unfinished claim.
func (e *executor) StepRelease(ctx context.Context, p *twicestore.StepParams) error {
	if err := p.CheckStep(); err != nil {
		return err
	}
	var fenced int64
	err := e.q.queryRow(ctx, `WITH fence AS (`+fenceFor(p)+`),
del AS (
	DELETE FROM twice_steps
	WHERE handler = $3 AND key = $4 AND step = $5 AND job_id = $1 AND epoch = $2 AND done_at IS NULL
		AND EXISTS (SELECT 1 FROM fence)
)
SELECT count(*) FROM fence`, p.JobID, p.Epoch, p.Handler, p.Key, p.Step).Scan(&fenced)
	switch {
	case err != nil:
		return fmt.Errorf("release step %q of %q/%q: %w", p.Step, p.Handler, p.Key, err)
	case fenced == 0:
		return fenceErr(p)
	}
	return nil
}

// StepSettle settles an unfinished claim: done with the receipt, or
// deleted without one; never the claim of a job that is running.
func (e *executor) StepSettle(ctx context.Context, p *twicestore.StepParams) error {
	if err := p.CheckSettle(); err != nil {
		return err
	}
	var n int64
	var err error
	if p.Receipt != nil {
		n, err = e.q.exec(ctx, `UPDATE twice_steps s SET done_at = $4, receipt = $5
			WHERE handler = $1 AND key = $2 AND step = $3 AND done_at IS NULL AND `+claimantNotRunningSQL,
			p.Handler, p.Key, p.Step, nowOr(p.Now), string(p.Receipt))
	} else {
		n, err = e.q.exec(ctx, `DELETE FROM twice_steps s
			WHERE handler = $1 AND key = $2 AND step = $3 AND done_at IS NULL AND `+claimantNotRunningSQL,
			p.Handler, p.Key, p.Step)
	}
	switch {
	case err != nil:
		return fmt.Errorf("settle step %q of %q/%q: %w", p.Step, p.Handler, p.Key, err)
	case n == 1:
		return nil
	}
	// Nothing settled: no unfinished claim, or its job is running.
	var jobID int64
	err = e.q.queryRow(ctx, `SELECT job_id FROM twice_steps WHERE handler = $1 AND key = $2 AND step = $3 AND done_at IS NULL`,
		p.Handler, p.Key, p.Step).Scan(&jobID)
	switch {
	case isNoRows(err):
		return fmt.Errorf("settle step %q of %q/%q: no unfinished claim: %w", p.Step, p.Handler, p.Key, twicestore.ErrNotFound)
	case err != nil:
		return fmt.Errorf("settle step %q of %q/%q: %w", p.Step, p.Handler, p.Key, err)
	}
	return fmt.Errorf("settle step %q of %q/%q: job %d, which claimed it, is running: %w",
		p.Step, p.Handler, p.Key, jobID, twicestore.ErrStepRunning)
}

// claimantNotRunningSQL holds when the job that claimed step s is not
// running: a running delivery may be in the step's effect, so a person's
// settle must wait until it ends.
const claimantNotRunningSQL = `NOT EXISTS (SELECT 1 FROM twice_jobs j WHERE j.id = s.job_id AND j.state = 'running')`

// StepPrune deletes up to Limit of the oldest steps claimed before Before.
func (e *executor) StepPrune(ctx context.Context, p *twicestore.MarkerPruneParams) (*twicestore.MarkerPruneResult, error) {
	n, from, err := e.pruneFrom(ctx, stepPruneSQL, p.Before, limitArg(p.Limit), p.From)
	if err != nil {
		return nil, fmt.Errorf("prune steps: %w", err)
	}
	return &twicestore.MarkerPruneResult{Deleted: n, From: from}, nil
}

// jobOutputSQL reads what JobOutput and JobAwait return.
const jobOutputSQL = `state, output, note,
	coalesce(errors -> (jsonb_array_length(errors) - 1) ->> 'error', '')`

// JobOutput returns a job's state and output.
func (e *executor) JobOutput(ctx context.Context, p *twicestore.JobGetParams) (*twicestore.JobOutputResult, error) {
	return e.jobOutput(ctx, `SELECT `+jobOutputSQL+` FROM twice_jobs WHERE id = $1`, p.ID)
}

// JobAwait marks a job as awaited and returns its state and output.
//
// The update locks the job's row for a moment, and a fetch running then
// skips it (SKIP LOCKED) and would leave an available job to the next
// poll; so, for an available job, it sends the queue's insert
// notification afterwards, and the workers fetch again.
func (e *executor) JobAwait(ctx context.Context, p *twicestore.JobGetParams) (*twicestore.JobOutputResult, error) {
	var queue string
	res, err := e.jobOutput(ctx, `UPDATE twice_jobs SET awaited = true WHERE id = $1 RETURNING `+jobOutputSQL+`, queue`,
		p.ID, &queue)
	if err != nil {
		return nil, err
	}
	if res.State == twicetype.JobStateAvailable {
		if _, err := e.q.exec(ctx, `SELECT pg_notify($1, $2)`, e.notify.channel, queue); err != nil {
			return nil, fmt.Errorf("await job %d: wake its queue %q: %w", p.ID, queue, err)
		}
	}
	return res, nil
}

func (e *executor) jobOutput(ctx context.Context, sql string, id int64, more ...any) (*twicestore.JobOutputResult, error) {
	res := &twicestore.JobOutputResult{}
	var state string
	var output *string
	err := e.q.queryRow(ctx, sql, id).Scan(append([]any{&state, &output, &res.Note, &res.Error}, more...)...)
	if isNoRows(err) {
		return nil, fmt.Errorf("job %d: %w", id, twicestore.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read output of job %d: %w", id, err)
	}
	res.State = twicetype.JobState(state)
	if output != nil {
		res.Output = []byte(*output)
	}
	return res, nil
}

// ListenFinished calls notify with the id of every awaited job of this
// schema that finishes, until ctx is done; it reconnects like
// ListenInserts.
func (s *Store) ListenFinished(ctx context.Context, notify func(jobID int64), listening func()) error {
	prefix := s.schema + ":"
	return s.listenLoopThen(ctx, finishedChannel, func(payload string) {
		rest, ok := strings.CutPrefix(payload, prefix)
		if !ok {
			return // another schema's job
		}
		if id, err := strconv.ParseInt(rest, 10, 64); err == nil {
			notify(id)
		}
	}, listening)
}

var _ twicestore.FinishListener = (*Store)(nil)

// listenLoopThen is listenLoop that also calls listening (when set) each
// time a connection listens.
func (s *Store) listenLoopThen(ctx context.Context, channel string, notify func(payload string), listening func()) error {
	backoff := listenBackoffMin
	for {
		_ = s.listen(ctx, channel, notify, func() {
			backoff = listenBackoffMin
			if listening != nil {
				listening()
			}
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, listenBackoffMax)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
