package twice

import (
	"context"
	"errors"

	"github.com/twicejobs/twice/internal/freetext"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// Tracer opens a span around each enqueue, each delivery of a job and each
// named step, for distributed tracing: twiceotel.Tracer implements it for
// OpenTelemetry. Its methods run on the runtime's hot paths: they must be
// quick and must not block.
type Tracer interface {
	// StartEnqueue is called before an enqueue checks and stores its jobs.
	// op names the entry point (enqueue, workflow, batch, continuation or
	// schedule) and n counts the jobs. The jobs' metadata
	// (Config.EnqueueMetadata) is read from the context it returns, and
	// end is called once, with the stored jobs (nil for a continuation,
	// stored later with its parent's completion) or the error.
	StartEnqueue(ctx context.Context, op string, n int) (_ context.Context, end func(jobs []*twicetype.JobRow, err error))
	// StartDelivery is called when a delivery of job starts, past its
	// kill switch; earlier, when set, is the context of an earlier
	// delivery of the same attempt (Config.Redeliver). The handler runs
	// in the context it returns.
	StartDelivery(ctx context.Context, job *twicetype.JobRow, strategy Strategy, earlier context.Context) (context.Context, DeliverySpan)
	// StartStep is called when a named step (Step) starts; end is called
	// with how it ended: "ran", "receipt" (an earlier delivery's receipt
	// returned, nothing ran) or "failed".
	StartStep(ctx context.Context, name string, s Strategy) (_ context.Context, end func(status string, err error))
}

// DeliverySpan is a Tracer's span of one delivery of a job.
type DeliverySpan struct {
	// Trace is stored with the delivery's outcome (JobRow.Trace), so the
	// job's next attempt, on any node, links to this one: text of at most
	// twicestore.MaxTraceBytes, dropped otherwise.
	Trace string
	// End is called once, when the delivery's outcome is settled.
	End func(DeliveryEnd)
}

// DeliveryEnd is how one delivery of a job ended.
type DeliveryEnd struct {
	// Marker is what the delivery did with its idempotency marker:
	// "claimed" (it claimed it for its effect), "hit" (an earlier
	// delivery had: the effect did not run again) or "none".
	Marker string
	// Outcome is the job's outcome this delivery recorded: completed,
	// noop, retry, dead, snoozed, cancelled or requeued; fenced when the
	// lease fence refused it; unrecorded when its write failed; or, for
	// the delivery of a pair (Config.Redeliver) whose outcome was not the
	// one written, its own: noop, completed or failed.
	Outcome string
	// Err is the handler's error, if any.
	Err error
}

// The Tracer's enqueue operations.
const (
	traceOpEnqueue      = "enqueue"
	traceOpWorkflow     = "workflow"
	traceOpBatch        = "batch"
	traceOpContinuation = "continuation"
	traceOpSchedule     = "schedule"
)

// The Tracer's marker and outcome names, beside the ones a job state
// gives.
const (
	markerClaimed     = "claimed"
	markerHit         = "hit"
	markerNone        = "none"
	outcomeNoop       = "noop"
	outcomeRetry      = "retry"
	outcomeSnoozed    = "snoozed"
	outcomeRequeued   = "requeued"
	outcomeFenced     = "fenced"
	outcomeUnrecorded = "unrecorded"
	outcomeFailed     = "failed"
	stepStatusRan     = "ran"
	stepStatusReceipt = "receipt"
	stepStatusFailed  = "failed"
)

// traceEnqueue starts the Tracer's span of an enqueue; without a Tracer it
// returns ctx and an end that does nothing.
func (c *Client) traceEnqueue(ctx context.Context, op string, n int) (context.Context, func([]*twicetype.JobRow, error)) {
	if c.cfg.Tracer == nil {
		return ctx, func([]*twicetype.JobRow, error) {}
	}
	return c.cfg.Tracer.StartEnqueue(ctx, op, n)
}

// insertedRows are the rows of an insert's results.
func insertedRows(res []*EnqueueResult) []*twicetype.JobRow {
	rows := make([]*twicetype.JobRow, len(res))
	for i, r := range res {
		rows[i] = r.Job
	}
	return rows
}

// deliverySpan is a delivery's span, or nil without a Tracer.
type deliverySpan struct {
	trace string
	end   func(DeliveryEnd)
	// ctx is the delivery's context, for a second delivery's link.
	ctx context.Context
}

// startDelivery starts the Tracer's span of one delivery and returns the
// handler's context.
func (x *executor) startDelivery(ctx context.Context, row *twicetype.JobRow, s Strategy, earlier *deliverySpan) (context.Context, *deliverySpan) {
	if x.cfg.Tracer == nil {
		return ctx, nil
	}
	var earlierCtx context.Context
	if earlier != nil {
		earlierCtx = earlier.ctx
	}
	ctx, span := x.cfg.Tracer.StartDelivery(ctx, row, s, earlierCtx)
	trace := span.Trace
	if freetext.Check("trace", trace, twicestore.MaxTraceBytes) != nil {
		trace = "" // a tracer's fault: a missing link, not a failed write
	}
	return ctx, &deliverySpan{trace: trace, end: span.End, ctx: ctx}
}

// finish ends the span, once.
func (s *deliverySpan) finish(marker, outcome string, err error) {
	if s == nil || s.end == nil {
		return
	}
	end := s.end
	s.end = nil
	end(DeliveryEnd{Marker: marker, Outcome: outcome, Err: err})
}

// traceOf is the trace an outcome stores: its delivery's.
func (s *deliverySpan) traceOf() string {
	if s == nil {
		return ""
	}
	return s.trace
}

// markerOf says what a delivery did with its marker.
func (d delivery) markerOf() string {
	switch {
	case d.noop == noteAlreadyProcessed:
		return markerHit
	case d.claimed:
		return markerClaimed
	}
	return markerNone
}

// ownOutcome names how a delivery ended by itself, for the one of a
// redelivered pair whose outcome was not the one written.
func (d delivery) ownOutcome() string {
	var noop *NoOpError
	switch {
	case d.noop != "", errors.As(d.err, &noop):
		return outcomeNoop
	case d.err != nil:
		return outcomeFailed
	}
	return string(twicetype.JobStateCompleted)
}

// outcomeName names a written outcome for its span.
func outcomeName(o *twicestore.JobOutcome) string {
	switch {
	case o.State == twicetype.JobStateCompleted && o.Note != "":
		return outcomeNoop
	case o.State != twicetype.JobStateAvailable:
		return string(o.State)
	case o.Snooze:
		return outcomeSnoozed
	case o.Error != nil:
		return outcomeRetry
	}
	return outcomeRequeued
}

// traceStep starts the Tracer's span of a named step.
func (r *stepRun) traceStep(ctx context.Context, name string, s Strategy) (context.Context, func(string, error)) {
	if r.tracer == nil {
		return ctx, func(string, error) {}
	}
	return r.tracer.StartStep(ctx, name, s)
}
