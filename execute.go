package twice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"time"

	"github.com/twicejobs/twice/internal/logattr"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// outcomeWriteTimeout bounds the writes that record a finished effect: they
// run on a context the handler's cancellation cannot reach.
const outcomeWriteTimeout = 10 * time.Second

// noteAlreadyProcessed is the note of a job its marker turned into a no-op:
// shown on the job, and counted as a duplicate by the Observer.
const noteAlreadyProcessed = "already processed"

// delivery is what one run of a job through its strategy produced.
type delivery struct {
	err  error  // the handler's error, or the strategy's; nil on success
	noop string // set when the job completed without its effect running
	// committed is set when the outcome was already written in the
	// strategy's own transaction (Transactional).
	committed bool
	// marker is claimed together with the job's completion (ClaimAfter's
	// claim, after a successful effect).
	marker *twicestore.MarkerParams
}

// work runs one leased job: it applies the kind's strategy around the
// handler and hands the outcome to the completer.
func (c *Client) work(row *twicetype.JobRow) {
	entry := c.registry.lookup(row.Kind)
	logger := c.jobLogger(row)
	if entry == nil { // fetch only asks for registered kinds
		logger.Error("fetched a job of an unregistered kind; putting it back", logattr.Component, "executor")
		c.finish(row, logger, &twicestore.JobOutcome{
			ID: row.ID, Epoch: row.Epoch, State: twicetype.JobStateAvailable, RunAt: time.Now(), RefundAttempt: true,
		}, nil)
		return
	}

	// The kill switch, checked before every attempt. Fetching already leaves
	// out kinds switched off; this catches a flip between fetch and run.
	if !c.kindEnabled(row.Kind) {
		logger.Warn("job held: its kind was switched off; it goes back to the queue with its attempt unspent",
			logattr.Component, "executor")
		c.finish(row, logger, &twicestore.JobOutcome{
			ID: row.ID, Epoch: row.Epoch, State: twicetype.JobStateAvailable, RunAt: time.Now(), RefundAttempt: true,
			Note: "held: kill switch off",
		}, nil)
		c.observe(EventSkipped, row)
		return
	}

	ctx, cancel := context.WithCancelCause(c.workCtx)
	defer cancel(nil)
	if entry.opts.Timeout > 0 {
		var cancelTimeout context.CancelFunc
		ctx, cancelTimeout = context.WithTimeoutCause(ctx, entry.opts.Timeout,
			fmt.Errorf("job exceeded its %s timeout", entry.opts.Timeout))
		defer cancelTimeout()
	}
	ctx = withLogger(WithCorrelationID(ctx, row.CorrelationID), logger)
	ctx = c.observeStart(ctx, row)
	c.track(row, cancel)

	if c.cfg.Redeliver {
		c.redeliver(ctx, entry, row, logger)
		return
	}
	c.record(ctx, entry, row, logger, c.deliver(ctx, entry, row, logger), nil)
}

// record writes a delivery's outcome (unless its transaction already did)
// and calls written, if set, once that is settled, telling whether the
// outcome was recorded.
func (c *Client) record(ctx context.Context, entry *kindEntry, row *twicetype.JobRow, logger *slog.Logger, d delivery, written func(recorded bool)) {
	c.observeDelivery(ctx, row, d)
	if d.committed {
		c.untrack(row)
		logger.DebugContext(ctx, "job completed", logattr.Component, "executor")
		if written != nil {
			written(true)
		}
		return
	}
	o := c.classify(ctx, entry, row, logger, d)
	c.finish(row, logger, o, c.observeWritten(ctx, row, o, written))
}

// redeliver delivers the job twice on purpose, so a handler that does not
// converge shows it in development: half the time both deliveries run at
// once, as on two nodes; otherwise the second comes after the first's
// outcome is written, as a redelivery after a lost acknowledgement would,
// and it must converge to a no-op. ClaimAfter kinds are only redelivered in
// a row: two copies at once may both pass the peek, a duplicate the
// strategy accepts by design, so it would show nothing about the handler.
func (c *Client) redeliver(ctx context.Context, entry *kindEntry, row *twicetype.JobRow, logger *slog.Logger) {
	again := logger.With("redelivery", true)
	if entry.opts.Strategy != ClaimAfter && rand.IntN(2) == 0 {
		var d1, d2 delivery
		var wg sync.WaitGroup
		wg.Go(func() { d2 = c.deliver(ctx, entry, row, again) })
		d1 = c.deliver(ctx, entry, row, logger)
		wg.Wait()
		c.record(ctx, entry, row, logger, mergeDeliveries(d1, d2), nil)
		return
	}
	d := c.deliver(ctx, entry, row, logger)
	if d.err != nil {
		c.record(ctx, entry, row, logger, d, nil) // a failure is retried, not redelivered
		return
	}
	recorded := make(chan bool, 1)
	c.record(ctx, entry, row, logger, d, func(ok bool) { recorded <- ok })
	if !<-recorded {
		return // the first outcome was lost: the job will be delivered again anyway
	}
	if d2 := c.deliver(ctx, entry, row, again); d2.err != nil {
		again.ErrorContext(ctx, "the second delivery of a completed job failed: the handler does not converge",
			logattr.Component, "executor", logattr.Err, d2.err)
	}
}

// mergeDeliveries is the outcome of two deliveries of one job that ran at
// once: a committed one has already decided it; otherwise a failure wins,
// so the job is retried.
func mergeDeliveries(d1, d2 delivery) delivery {
	switch {
	case d1.committed:
		return d1
	case d2.committed:
		return d2
	case d1.err != nil:
		return d1
	case d2.err != nil:
		return d2
	case d1.marker == nil:
		return d2
	}
	return d1
}

// deliver applies the kind's strategy around one call of the handler.
func (c *Client) deliver(ctx context.Context, entry *kindEntry, row *twicetype.JobRow, logger *slog.Logger) delivery {
	marker := &twicestore.MarkerParams{Handler: entry.opts.HandlerName, Key: row.Key, JobID: row.ID, Epoch: row.Epoch}
	switch entry.opts.Strategy {
	case ClaimAfter:
		peek, err := c.peekMarker(ctx, row, marker)
		if err != nil {
			return delivery{err: fmt.Errorf("peek marker: %w", err)}
		}
		if peek.Processed {
			return delivery{noop: noteAlreadyProcessed}
		}
		err = c.runHandler(ctx, entry, row, nil)
		if err != nil {
			return delivery{err: err} // never claim after an error: the retry must really re-run
		}
		// The effect happened. The claim is written with the job's
		// completion, in one transaction on a context the handler's
		// cancellation cannot reach, so a shutdown cannot skip it.
		return delivery{marker: marker}

	case ClaimBefore:
		marker.Now = time.Now()
		claim, err := c.store.MarkerClaim(ctx, marker)
		if err != nil {
			return delivery{err: fmt.Errorf("claim marker: %w", err)}
		}
		if claim.AlreadyProcessed {
			if interrupted(claim.Existing, row) {
				m := claim.Existing
				return delivery{err: Permanent(fmt.Errorf("%w: handler %q claimed key %q at %s in lease epoch %d of this job "+
					"(this is epoch %d); check whether the effect happened: if not, run `twice markers release %s %s` "+
					"and retry the job, if so, discard it", ErrEffectUncertain, m.Handler, m.Key,
					m.ProcessedAt.Format(time.RFC3339), m.Epoch, row.Epoch, m.Handler, m.Key))}
			}
			return delivery{noop: noteAlreadyProcessed}
		}
		err = c.runHandler(ctx, entry, row, nil)
		var notApplied *NotAppliedError
		var snooze *SnoozeError
		var noop *NoOpError
		switch {
		case err == nil, errors.As(err, &noop):
			return delivery{err: err}
		case errors.As(err, &notApplied), errors.As(err, &snooze):
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), outcomeWriteTimeout)
			defer cancel()
			if rerr := c.store.MarkerRelease(wctx, marker); rerr != nil {
				// Keeping the claim turns the retry into a no-op: that is
				// loss, so dead-letter instead of pretending to retry.
				return delivery{err: Permanent(fmt.Errorf("release claim after %v: %w", err, rerr))}
			}
			return delivery{err: err}
		default:
			return delivery{err: Permanent(fmt.Errorf("%w (strategy claim-before: the effect may have happened, "+
				"so the claim is kept and the job needs a human; return twice.NotApplied(err) when it certainly did not)", err))}
		}

	case Transactional:
		return c.deliverTx(ctx, entry, row, marker)

	default: // None
		return delivery{err: c.runHandler(ctx, entry, row, nil)}
	}
}

// interrupted reports whether a claim found by a ClaimBefore delivery was
// made by an earlier delivery of the same job that did not finish its
// effect for sure: it crashed or lost its lease before recording an
// outcome, was cut short by a shutdown, or failed and was dead-lettered
// and then retried by hand without its claim released. A success would have
// completed the job, and NotApplied and Snooze release the claim. A claim of the same epoch is this
// very delivery's twin (redelivery mode), and a claim by another job is
// another copy of the message: both are plain duplicates.
func interrupted(m *twicetype.Marker, row *twicetype.JobRow) bool {
	return m != nil && m.JobID == row.ID && m.Epoch != 0 && m.Epoch < row.Epoch
}

// deliverTx claims the marker, runs the handler and completes the job in one
// transaction, checking the lease epoch inside it.
func (c *Client) deliverTx(ctx context.Context, entry *kindEntry, row *twicetype.JobRow, marker *twicestore.MarkerParams) delivery {
	tx, err := c.store.Begin(ctx)
	if err != nil {
		return delivery{err: fmt.Errorf("begin transaction: %w", err)}
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // after Commit, a no-op
	marker.Now = time.Now()
	claim, err := tx.MarkerClaim(ctx, marker)
	if err != nil {
		return delivery{err: fmt.Errorf("claim marker: %w", err)}
	}
	if claim.AlreadyProcessed {
		return delivery{noop: noteAlreadyProcessed}
	}
	if err := c.runHandler(ctx, entry, row, tx); err != nil {
		return delivery{err: err}
	}
	now := time.Now()
	res, err := tx.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{
		ID: row.ID, Epoch: row.Epoch, State: twicetype.JobStateCompleted, FinishedAt: now,
	}}})
	if err != nil {
		return delivery{err: fmt.Errorf("complete job in transaction: %w", err)}
	}
	if !res.Applied[0] {
		return delivery{err: fmt.Errorf("%w: the effect was rolled back", ErrLeaseLost)}
	}
	if err := tx.Commit(ctx); err != nil {
		return delivery{err: fmt.Errorf("commit: %w", err)}
	}
	return delivery{committed: true}
}

// runHandler calls the handler through the configured middleware, turning
// a panic into a *PanicError.
func (c *Client) runHandler(ctx context.Context, entry *kindEntry, row *twicetype.JobRow, tx twicestore.Tx) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: string(debug.Stack())}
		}
	}()
	next := func(ctx context.Context) error { return entry.run(ctx, row, tx) }
	for i := len(c.cfg.Middleware) - 1; i >= 0; i-- {
		mw, inner := c.cfg.Middleware[i], next
		next = func(ctx context.Context) error { return mw(ctx, row, inner) }
	}
	return next(ctx)
}

// classify turns a delivery into the job's outcome.
func (c *Client) classify(ctx context.Context, entry *kindEntry, row *twicetype.JobRow, logger *slog.Logger, d delivery) *twicestore.JobOutcome {
	now := time.Now()
	o := &twicestore.JobOutcome{ID: row.ID, Epoch: row.Epoch}
	err := d.err
	var (
		noop      *NoOpError
		snooze    *SnoozeError
		permanent *PermanentError
		panicErr  *PanicError
	)
	switch {
	case err == nil || errors.As(err, &noop):
		o.State, o.FinishedAt = twicetype.JobStateCompleted, now
		o.Note, o.Marker = d.noop, d.marker
		if o.Marker != nil {
			o.Marker.Now = now
		}
		if noop != nil {
			o.Note = noop.Reason
		}
		if o.Note != "" {
			logger.InfoContext(ctx, "job completed as a no-op", logattr.Component, "executor", "reason", o.Note)
		}
		return o
	case errors.As(err, &snooze):
		o.State, o.RunAt, o.RefundAttempt = twicetype.JobStateAvailable, now.Add(snooze.Duration), true
		o.Note = err.Error()
		logger.InfoContext(ctx, "job snoozed", logattr.Component, "executor", "for", snooze.Duration)
		return o
	case errors.Is(context.Cause(ctx), ErrShutdown):
		o.State, o.RunAt, o.RefundAttempt = twicetype.JobStateAvailable, now, true
		o.Note = "requeued on shutdown"
		logger.InfoContext(ctx, "job requeued on shutdown", logattr.Component, "executor", logattr.Err, err)
		return o
	}
	ae := &twicetype.AttemptError{Attempt: row.Attempt, At: now, Error: err.Error()}
	if errors.As(err, &panicErr) {
		ae.Stack = panicErr.Stack
	}
	o.Error = ae
	if errors.As(err, &permanent) || row.Attempt >= row.MaxAttempts {
		o.State, o.FinishedAt = twicetype.JobStateDead, now
		logger.ErrorContext(ctx, "job dead-lettered", logattr.Component, "executor", logattr.Err, err,
			"max_attempts", row.MaxAttempts)
		return o
	}
	o.State, o.RunAt = twicetype.JobStateAvailable, now.Add(c.cfg.Backoff(row.Attempt))
	logger.WarnContext(ctx, "job failed; will retry", logattr.Component, "executor", logattr.Err, err, "run_at", o.RunAt)
	return o
}

// finish hands an outcome to the completer; the job stays tracked (and its
// lease extended) until the outcome is written. written, if set, is called
// after that, telling whether the outcome was recorded.
func (c *Client) finish(row *twicetype.JobRow, logger *slog.Logger, o *twicestore.JobOutcome, written func(recorded bool)) {
	added := c.complete.Add(o, func(applied bool, err error) {
		c.untrack(row)
		if written != nil {
			defer written(applied && err == nil)
		}
		switch {
		case err != nil:
			logger.Error("recording job outcome failed; the job will run again when its lease expires",
				logattr.Component, "completer", logattr.Err, err)
		case !applied:
			logger.Warn("job outcome discarded: the lease was lost and another worker may hold the job",
				logattr.Component, "completer", "epoch", row.Epoch)
		case o.State == twicetype.JobStateDead && c.cfg.OnDead != nil:
			dead := *row
			dead.State, dead.FinishedAt = twicetype.JobStateDead, o.FinishedAt
			dead.Errors = append(append([]twicetype.AttemptError(nil), row.Errors...), *o.Error)
			var jobErr error = errors.New(o.Error.Error)
			c.cfg.OnDead(context.Background(), DeadJob{Job: &dead, Err: jobErr})
		}
	})
	if !added {
		c.untrack(row)
		logger.Warn("job finished after the worker stopped; its outcome is not recorded and the job will run again when its lease expires",
			logattr.Component, "executor")
		if written != nil {
			written(false)
		}
	}
}
