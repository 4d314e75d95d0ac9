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

	"github.com/twicejobs/twice/internal/completer"
	"github.com/twicejobs/twice/internal/logattr"
	"github.com/twicejobs/twice/internal/producer"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// outcomeWriteTimeout bounds the writes that record a finished effect: they
// run on a context the handler's cancellation cannot reach.
const outcomeWriteTimeout = 10 * time.Second

// noteAlreadyProcessed is the note of a job its marker turned into a no-op:
// shown on the job, and counted as a duplicate by the Observer.
const noteAlreadyProcessed = "already processed"

// executor runs leased jobs. It holds what every job's path needs; each
// fetched job becomes an execution, whose methods below read in the order
// a job goes through them: the kill switch, the handler's context, the
// strategy around the handler, the outcome, and its write.
type executor struct {
	store    twicestore.Store
	registry *Registry
	cfg      *Config
	logger   *slog.Logger
	complete *completer.Completer
	running  *runningJobs
	// enabled reports whether a kind's kill switch lets it run now.
	enabled func(kind string) bool
	// workCtx is the parent of every handler's context; Stop cancels it
	// with ErrShutdown when the grace period runs out.
	workCtx context.Context
	// slotFreed, when set, is told the kind of each job whose outcome was
	// recorded: a limited kind's slot is free once the row left running,
	// not when the handler returned, so that is when to fetch again.
	slotFreed func(kind string)
	// childParams checks a continuation a handler records (Job.Then).
	childParams func(ctx context.Context, args Args, opts *EnqueueOpts) (*twicestore.JobInsertParams, error)
	// now is the client's clock.
	now func() time.Time
}

// execution is one attempt of one leased job.
type execution struct {
	x      *executor
	row    *twicetype.JobRow
	entry  *kindEntry
	logger *slog.Logger
	// peek is the fetch's answer to ClaimAfter's peek. The first delivery
	// takes it; a second one (Config.Redeliver) peeks again, so it sees the
	// first one's claim.
	peek producer.Peek
	// ctx is the handler's context; the running jobs' registry holds its
	// cancel, for a lost lease or an operator's cancel.
	ctx   context.Context
	start time.Time
	// fetchedAt is when the fetch that leased the job began.
	fetchedAt time.Time
	// leaseLost is set when the attempt ended after its lease was lost.
	leaseLost bool
	// steps is what this delivery's named steps share (see step.go).
	steps *stepRun
	// span is this delivery's span, nil without a Tracer.
	span *deliverySpan
}

// Execute works one fetched job; the producer calls it on a worker
// goroutine.
func (x *executor) Execute(f producer.Fetched) {
	e := &execution{x: x, row: f.Row, peek: f.Peek, fetchedAt: f.FetchedAt, logger: jobLogger(x.logger, f.Row)}
	e.run()
}

func (e *execution) run() {
	e.entry = e.x.registry.lookup(e.row.Kind)
	if e.entry == nil { // fetch only asks for registered kinds
		e.logger.Error("fetched a job of an unregistered kind; putting it back", logattr.Component, "executor")
		e.finish(e.putBack(""), nil)
		return
	}
	// The kill switch, checked before every attempt. Fetching already leaves
	// out kinds switched off; this catches a flip between fetch and run.
	if !e.x.enabled(e.row.Kind) {
		e.logger.Warn("job held: its kind was switched off; it goes back to the queue with its attempt unspent",
			logattr.Component, "executor")
		e.finish(e.putBack("held: kill switch off"), nil)
		e.x.observe(EventSkipped, e.row)
		return
	}

	ctx, cancel := context.WithCancelCause(e.x.workCtx)
	defer cancel(nil)
	if t := e.entry.opts.Timeout; t > 0 {
		var cancelTimeout context.CancelFunc
		ctx, cancelTimeout = context.WithTimeoutCause(ctx, t, fmt.Errorf("job exceeded its %s timeout", t))
		defer cancelTimeout()
	}
	e.ctx = withLogger(WithCorrelationID(ctx, e.row.CorrelationID), e.logger)
	e.start = e.x.now()
	e.x.observeStart(e.row, e.fetchedAt, e.start)
	e.x.running.add(e.row, cancel)

	if e.x.cfg.Redeliver {
		e.redeliver()
		return
	}
	e.record(e.deliver(e.startSpan(nil)), nil)
}

// startSpan starts the Tracer's span of a delivery of the job; earlier is
// the span of an earlier delivery of this attempt (Config.Redeliver).
func (e *execution) startSpan(earlier *deliverySpan) *deliverySpan {
	_, span := e.x.startDelivery(e.ctx, e.row, e.entry.opts.Strategy, earlier)
	return span
}

// putBack is the outcome of a job that never started: back in its queue at
// once, its attempt unspent.
func (e *execution) putBack(note string) *twicestore.JobOutcome {
	return &twicestore.JobOutcome{
		ID: e.row.ID, Epoch: e.row.Epoch, State: twicetype.JobStateAvailable, RunAt: e.x.now(), RefundAttempt: true, Note: note,
	}
}

// delivery is what one run of a job through its strategy produced.
type delivery struct {
	err  error  // the handler's error, or the strategy's; nil on success
	noop string // set when the job completed without its effect running
	// committed is set when the outcome was already written in the
	// strategy's own transaction (Transactional).
	committed bool
	// claimed is set when the delivery claimed its marker for its
	// effect (and kept the claim).
	claimed bool
	// span is the delivery's span, nil without a Tracer.
	span *deliverySpan
	// marker is claimed together with the job's completion (ClaimAfter's
	// claim, after a successful effect).
	marker *twicestore.MarkerParams
	// output is what the handler recorded with RecordOutput.
	output []byte
	// children are the continuations the handler recorded (Job.Then),
	// inserted with the completion if this delivery's is the one written.
	children []*twicestore.JobInsertParams
}

// deliver applies the kind's strategy around one call of the handler, in
// span (nil without a Tracer), and counts a delivery the marker absorbed.
func (e *execution) deliver(span *deliverySpan) delivery {
	e.steps = &stepRun{store: e.x.store, row: e.row, handler: e.entry.opts.HandlerName, strategy: e.entry.opts.Strategy,
		tracer: e.x.cfg.Tracer, waitTokenKey: e.x.cfg.WaitTokenKey}
	// Each delivery gathers its own continuations; they travel with its
	// outcome (see edgeSet).
	es := &edgeSet{build: e.x.childParams, store: e.x.store, jobID: e.row.ID}
	outer := e.ctx
	if span != nil {
		e.ctx = span.ctx
	}
	e.ctx = withEdgeSet(e.ctx, es)
	e.span = span
	defer func() { e.ctx = outer }()
	var d delivery
	switch e.entry.opts.Strategy {
	case ClaimAfter:
		d = e.claimAfter()
	case ClaimBefore:
		d = e.claimBefore()
	case Transactional:
		d = e.transactional()
	default: // None
		d = delivery{err: e.callHandler(nil)}
	}
	if d.noop == noteAlreadyProcessed {
		e.x.observe(EventDuplicate, e.row)
	}
	d.output = e.steps.recorded()
	d.children = es.take()
	d.span = span
	return d
}

func (e *execution) marker() *twicestore.MarkerParams {
	return &twicestore.MarkerParams{Handler: e.entry.opts.HandlerName, Key: e.row.Key, JobID: e.row.ID, Epoch: e.row.Epoch}
}

// claimAfter peeks the marker, runs the handler unless it is processed,
// and claims it with the job's completion after a success.
func (e *execution) claimAfter() delivery {
	marker := e.marker()
	processed, err := e.peekMarker(marker)
	if err != nil {
		return delivery{err: fmt.Errorf("peek marker: %w", err)}
	}
	if processed {
		return delivery{noop: noteAlreadyProcessed}
	}
	if err := e.callHandler(nil); err != nil {
		return delivery{err: err} // never claim after an error: the retry must really re-run
	}
	// The effect happened. The claim is written with the job's completion,
	// in one transaction on a context the handler's cancellation cannot
	// reach, so a shutdown cannot skip it.
	return delivery{marker: marker, claimed: true}
}

// peekMarker is ClaimAfter's peek: the fetch's answer when it brought one,
// else one MarkerPeek. An answer that was lost on the way reads as "not
// peeked" (see producer.Peek), so it peeks again rather than runs.
func (e *execution) peekMarker(m *twicestore.MarkerParams) (processed bool, err error) {
	peek := e.peek
	e.peek = producer.NotPeeked // taken once: a redelivery peeks again
	if peek != producer.NotPeeked {
		return peek == producer.Processed, nil
	}
	res, err := e.x.store.MarkerPeek(e.ctx, m)
	if err != nil {
		return false, err
	}
	return res.Processed, nil
}

// claimBefore claims the marker, then runs the handler; a failure keeps the
// claim and dead-letters the job, unless the handler says the effect
// certainly did not happen.
func (e *execution) claimBefore() delivery {
	marker := e.marker()
	marker.Now = e.x.now()
	claim, err := e.x.store.MarkerClaim(e.ctx, marker)
	if err != nil {
		return delivery{err: fmt.Errorf("claim marker: %w", err)}
	}
	if claim.AlreadyProcessed {
		if m := claim.Existing; interrupted(m, e.row) {
			return delivery{err: Permanent(fmt.Errorf("%w: handler %q claimed key %q at %s in lease epoch %d of this job "+
				"(this is epoch %d); check whether the effect happened: if not, run `twice markers release %s %s` "+
				"and retry the job, if so, discard it", ErrEffectUncertain, m.Handler, m.Key,
				m.ProcessedAt.Format(time.RFC3339), m.Epoch, e.row.Epoch, m.Handler, m.Key))}
		}
		return delivery{noop: noteAlreadyProcessed}
	}
	err = e.callHandler(nil)
	var (
		notApplied *NotAppliedError
		snooze     *SnoozeError
		noop       *NoOpError
		cancelled  *CancelError
		wait       *WaitError
	)
	switch {
	case err == nil, errors.As(err, &noop):
		return delivery{err: err, claimed: true}
	case errors.As(err, &notApplied), errors.As(err, &snooze), errors.As(err, &cancelled), errors.As(err, &wait):
		wctx, cancel := context.WithTimeout(context.WithoutCancel(e.ctx), outcomeWriteTimeout)
		defer cancel()
		if rerr := e.x.store.MarkerRelease(wctx, marker); rerr != nil {
			// Keeping the claim turns the retry into a no-op: that is
			// loss, so dead-letter instead of pretending to retry.
			return delivery{err: Permanent(fmt.Errorf("release claim after %w: %w", err, rerr))}
		}
		return delivery{err: err}
	default:
		return delivery{claimed: true, err: Permanent(fmt.Errorf("%w (strategy claim-before: the effect may have happened, "+
			"so the claim is kept and the job needs a human; return twice.NotApplied(err) when it certainly did not)", err))}
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

// transactional claims the marker, runs the handler and completes the job
// in one transaction, checking the lease epoch inside it. On any failure
// the transaction is rolled back before this returns.
func (e *execution) transactional() delivery {
	ctx := e.ctx
	tx, err := e.x.store.Begin(ctx)
	if err != nil {
		return delivery{err: fmt.Errorf("begin transaction: %w", err)}
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // after Commit, a no-op
	marker := e.marker()
	marker.Now = e.x.now()
	claim, err := tx.MarkerClaim(ctx, marker)
	if err != nil {
		return delivery{err: fmt.Errorf("claim marker: %w", err)}
	}
	if claim.AlreadyProcessed {
		return delivery{noop: noteAlreadyProcessed}
	}
	if err := e.callHandler(tx); err != nil {
		return delivery{err: err}
	}
	res, err := tx.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{
		ID: e.row.ID, Epoch: e.row.Epoch, State: twicetype.JobStateCompleted, FinishedAt: e.x.now(),
		Output:   e.steps.recorded(),
		Children: edgeSetOf(ctx).take(),
		Trace:    e.span.traceOf(),
	}}})
	if err != nil {
		return delivery{err: fmt.Errorf("complete job in transaction: %w", err)}
	}
	if !res.Applied[0] {
		return delivery{err: fmt.Errorf("%w: the effect was rolled back", ErrLeaseLost)}
	}
	if err := tx.Commit(ctx); err != nil {
		if ok, err := e.committedAnyway(err); !ok {
			return delivery{err: err}
		}
	}
	return delivery{committed: true, claimed: true}
}

// callHandler calls the handler through the configured middleware, turning
// a panic into a *PanicError.
func (e *execution) callHandler(tx twicestore.Tx) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: string(debug.Stack())}
		}
	}()
	row := e.row
	e.steps.tx = tx
	next := func(ctx context.Context) error { return e.entry.run(ctx, row, tx) }
	mws := e.x.cfg.Middleware
	for i := len(mws) - 1; i >= 0; i-- {
		mw, inner := mws[i], next
		next = func(ctx context.Context) error { return mw(ctx, row, inner) }
	}
	return next(withRun(e.ctx, e.steps))
}

// redeliver delivers the job twice on purpose, so a handler that does not
// converge shows it in development: half the time both deliveries run at
// once, as on two nodes; otherwise the second comes after the first's
// outcome is written, as a redelivery after a lost acknowledgement would,
// and it must converge to a no-op. ClaimAfter kinds are only redelivered in
// a row: two copies at once may both pass the peek, a duplicate the
// strategy accepts by design, so it would show nothing about the handler.
func (e *execution) redeliver() {
	span1 := e.startSpan(nil)
	if e.entry.opts.Strategy != ClaimAfter && rand.IntN(2) == 0 {
		var d1, d2 delivery
		var wg sync.WaitGroup
		again := *e
		again.logger = e.logger.With("redelivery", true)
		span2 := again.startSpan(span1)
		wg.Go(func() { d2 = again.deliver(span2) })
		d1 = e.deliver(span1)
		wg.Wait()
		d := mergeDeliveries(d1, d2)
		for _, other := range []delivery{d1, d2} {
			if other.span != d.span {
				other.span.finish(other.markerOf(), other.ownOutcome(), other.err)
			}
		}
		e.record(d, nil)
		return
	}
	d := e.deliver(span1)
	if d.err != nil {
		e.record(d, nil) // a failure is retried, not redelivered
		return
	}
	recorded := make(chan bool, 1)
	e.record(d, func(ok bool) { recorded <- ok })
	if !<-recorded {
		return // the first outcome was lost: the job will be delivered again anyway
	}
	again := *e
	again.logger = e.logger.With("redelivery", true)
	d2 := again.deliver(again.startSpan(span1))
	d2.span.finish(d2.markerOf(), d2.ownOutcome(), d2.err)
	if d2.err != nil {
		again.logger.ErrorContext(e.ctx, "the second delivery of a completed job failed: the handler does not converge",
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
	case d1.marker == nil && d2.marker != nil:
		return d2
	case d1.noop != "" && d2.noop == "":
		// The one that ran the handler carries its continuations; the
		// other found its claim and did nothing.
		return d2
	}
	return d1
}

// record writes a delivery's outcome (unless its transaction already did)
// and calls written, if set, once that is settled, telling whether the
// outcome was recorded.
func (e *execution) record(d delivery, written func(recorded bool)) {
	if d.committed {
		e.x.running.remove(e.row)
		d.span.finish(markerClaimed, string(twicetype.JobStateCompleted), nil)
		e.x.observeOutcome(e.row, twicetype.JobStateCompleted, false, e.start)
		e.logger.DebugContext(e.ctx, "job completed", logattr.Component, "executor")
		if written != nil {
			written(true)
		}
		return
	}
	o := e.outcome(d)
	o.Trace = d.span.traceOf()
	e.finishSpan(o, d, written)
}

// outcome turns a delivery into the job's outcome.
func (e *execution) outcome(d delivery) *twicestore.JobOutcome {
	now := e.x.now()
	o := &twicestore.JobOutcome{ID: e.row.ID, Epoch: e.row.Epoch}
	err := d.err
	var (
		cancelled *CancelError
		noop      *NoOpError
		snooze    *SnoozeError
		wait      *WaitError
		permanent *PermanentError
		panicErr  *PanicError
	)
	switch {
	case errors.Is(context.Cause(e.ctx), ErrJobCancelled), errors.As(err, &cancelled):
		// Cancelled by an operator (whatever the handler returned) or by
		// the handler itself: finished, never retried. A success's claim
		// is still written: its effect happened.
		o.State, o.FinishedAt, o.Marker = twicetype.JobStateCancelled, now, d.marker
		if o.Marker != nil {
			o.Marker.Now = now
		}
		if cancelled != nil {
			o.Note = storableText("cancelled by its handler: " + errString(cancelled.Err))
		} // else the store notes the operator's request
		e.logger.InfoContext(e.ctx, "job cancelled", logattr.Component, "executor", logattr.Err, err)
		return o
	case err == nil || errors.As(err, &noop):
		o.State, o.FinishedAt = twicetype.JobStateCompleted, now
		o.Note, o.Marker, o.Output, o.Children = d.noop, d.marker, d.output, d.children
		if o.Marker != nil {
			o.Marker.Now = now
		}
		if noop != nil {
			o.Note = storableText(noop.Reason)
		}
		if o.Note != "" {
			e.logger.InfoContext(e.ctx, "job completed as a no-op", logattr.Component, "executor", "reason", o.Note)
		}
		return o
	case errors.As(err, &wait):
		// Parked: no lease, no slot, no attempt spent. The fetched
		// SignalSeq lets the store run the job again at once when its
		// signal arrived while this attempt decided to wait.
		o.State, o.RunAt, o.RefundAttempt = twicetype.JobStateWaiting, wait.Until, true
		o.WaitName, o.SignalSeq = wait.Name, e.row.SignalSeq
		o.Note = storableText(wait.Error())
		e.logger.InfoContext(e.ctx, "job waiting", logattr.Component, "executor", "signal", wait.Name, "until", wait.Until)
		return o
	case errors.As(err, &snooze) && e.row.Snoozes >= e.maxSnoozes():
		// Past the kind's limit: a snooze gives its attempt back, so only
		// this stops a handler that always snoozes.
		err = Permanent(fmt.Errorf("%w: %d snoozes, the limit of kind %q (KindOpts.MaxSnoozes); "+
			"last: %w", ErrTooManySnoozes, e.row.Snoozes+1, e.row.Kind, err))
	case errors.As(err, &snooze):
		o.State, o.RunAt, o.RefundAttempt, o.Snooze = twicetype.JobStateAvailable, now.Add(snooze.Duration), true, true
		o.Note = storableText(err.Error())
		e.logger.InfoContext(e.ctx, "job snoozed", logattr.Component, "executor", "for", snooze.Duration,
			"snoozes", e.row.Snoozes+1)
		return o
	case errors.Is(context.Cause(e.ctx), ErrShutdown):
		o.State, o.RunAt, o.RefundAttempt = twicetype.JobStateAvailable, now, true
		o.Note = "requeued on shutdown"
		e.logger.InfoContext(e.ctx, "job requeued on shutdown", logattr.Component, "executor", logattr.Err, err)
		return o
	}
	ae := &twicetype.AttemptError{Attempt: e.row.Attempt, At: now, Error: storableText(err.Error())}
	if errors.As(err, &panicErr) {
		ae.Stack = storableText(panicErr.Stack)
	}
	o.Error = ae
	if errors.Is(context.Cause(e.ctx), ErrLeaseLost) || errors.Is(err, ErrLeaseLost) {
		// A stale holder: the store refuses this outcome (its epoch is
		// old), and the job's new holder decides what becomes of it.
		e.leaseLost = true
		o.State, o.RunAt = twicetype.JobStateAvailable, now
		e.logger.WarnContext(e.ctx, "job attempt ended after its lease was lost; its outcome is not recorded, "+
			"another worker may hold the job", logattr.Component, "executor", logattr.Err, err)
		return o
	}
	if errors.As(err, &permanent) || e.row.Attempt >= e.row.MaxAttempts {
		o.State, o.FinishedAt = twicetype.JobStateDead, now
		e.logger.ErrorContext(e.ctx, "job dead-lettered", logattr.Component, "executor", logattr.Err, err,
			"max_attempts", e.row.MaxAttempts)
		e.markFailed(err)
		return o
	}
	o.State, o.RunAt = twicetype.JobStateAvailable, now.Add(e.x.cfg.Backoff(e.row.Attempt))
	e.logger.WarnContext(e.ctx, "job failed; will retry", logattr.Component, "executor", logattr.Err, err, "run_at", o.RunAt)
	return o
}

// maxSnoozes is the kind's snooze limit.
func (e *execution) maxSnoozes() int {
	if n := e.entry.opts.MaxSnoozes; n > 0 {
		return n
	}
	return MaxSnoozesDefault
}

// markFailed runs a Staged handler's MarkFailed for a failure that
// dead-letters the job, once the attempt is over: for Transactional, after
// its transaction was rolled back, in a transaction of its own.
func (e *execution) markFailed(err error) {
	var mf *markFailedError
	if !errors.As(err, &mf) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.ctx), markFailedTimeout)
	defer cancel()
	var merr error
	if e.entry.opts.Strategy == Transactional {
		merr = e.inTx(ctx, func(tx twicestore.Tx) error { return mf.mark(ctx, tx) })
	} else {
		merr = mf.mark(ctx, nil)
	}
	if merr != nil {
		e.logger.ErrorContext(ctx, "marking the row failed did not work; the job is dead-lettered anyway",
			logattr.Component, "executor", logattr.Err, merr)
	}
}

// inTx runs fn in a transaction of its own, committed when fn returns nil.
func (e *execution) inTx(ctx context.Context, fn func(tx twicestore.Tx) error) error {
	tx, err := e.x.store.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // after Commit, a no-op
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// finish hands an outcome to the completer; the job stays tracked (and its
// lease extended) until the outcome is written. written, if set, is called
// after that, telling whether the outcome was recorded.
func (e *execution) finish(o *twicestore.JobOutcome, written func(recorded bool)) {
	e.finishSpan(o, delivery{}, written)
}

// finishSpan is finish for the outcome of delivery d, whose span it ends
// once the outcome is settled.
func (e *execution) finishSpan(o *twicestore.JobOutcome, d delivery, written func(recorded bool)) {
	done := func(applied bool, err error) {
		e.x.running.remove(e.row)
		recorded, explained, fenced := e.recheckOutcome(o, applied, err)
		applied = applied || recorded
		if fenced {
			e.x.observe(EventFenced, e.row)
		}
		switch {
		case err != nil && !applied:
			d.span.finish(d.markerOf(), outcomeUnrecorded, d.err)
		case !applied:
			d.span.finish(d.markerOf(), outcomeFenced, d.err)
		default:
			d.span.finish(d.markerOf(), outcomeName(o), d.err)
		}
		switch {
		case err != nil:
			e.logger.Error("recording job outcome failed; if the write did not commit, the job runs again when its lease expires",
				logattr.Component, "completer", logattr.Err, err)
		case !applied && (e.leaseLost || explained): // said when the attempt ended, or by recheckOutcome
		case !applied:
			e.logger.Warn("job outcome discarded: the lease was lost and another worker may hold the job",
				logattr.Component, "completer", "epoch", e.row.Epoch)
		default:
			if !e.start.IsZero() { // a job put back before it started is no result
				e.x.observeOutcome(e.row, o.State, o.Error != nil, e.start)
			}
			if o.State == twicetype.JobStateDead {
				e.x.onDead(e.row, o)
			}
			if e.x.slotFreed != nil {
				e.x.slotFreed(e.row.Kind)
			}
		}
		if written != nil {
			written(recorded)
		}
	}
	leaseUntil := func() time.Time { return e.x.running.leaseUntil(e.row) }
	e.x.running.returned(e.row)
	if !e.x.complete.Add(o, leaseUntil, done) {
		e.x.running.remove(e.row)
		d.span.finish(d.markerOf(), outcomeUnrecorded, d.err)
		e.logger.Warn("job finished after the worker stopped; its outcome is not recorded and the job will run again when its lease expires",
			logattr.Component, "executor")
		if written != nil {
			written(false)
		}
	}
}

// onDead calls Config.OnDead for a job whose dead-lettering was recorded.
func (x *executor) onDead(row *twicetype.JobRow, o *twicestore.JobOutcome) {
	if x.cfg.OnDead == nil {
		return
	}
	dead := *row
	dead.State, dead.FinishedAt = twicetype.JobStateDead, o.FinishedAt
	dead.Errors = append(append([]twicetype.AttemptError(nil), row.Errors...), *o.Error)
	x.cfg.OnDead(context.Background(), DeadJob{Job: &dead, Err: errors.New(o.Error.Error)})
}
