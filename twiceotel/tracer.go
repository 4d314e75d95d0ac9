package twiceotel

import (
	"context"
	"encoding/hex"
	"strings"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicetype"
)

// Attribute keys of twice's spans, beside the metrics' ones.
const (
	attrOperationType = attribute.Key("messaging.operation.type")
	attrMessageID     = attribute.Key("messaging.message.id")
	attrBatchCount    = attribute.Key("messaging.batch.message_count")
	attrJobID         = attribute.Key("twice.job.id")
	attrStrategy      = attribute.Key("twice.strategy")
	attrMarker        = attribute.Key("twice.marker")
	attrEpoch         = attribute.Key("twice.epoch")
	attrAttempt       = attribute.Key("twice.attempt")
	attrDuplicates    = attribute.Key("twice.duplicates")
	attrStep          = attribute.Key("twice.step")
	attrStepStatus    = attribute.Key("twice.step.status")
	// attrLink says what a link of a delivery's span points to: producer
	// (the enqueue), previous (the job's previous attempt), redelivery
	// (the first delivery of this attempt, Config.Redeliver) or dependency
	// (a workflow task this one waited for).
	attrLink = attribute.Key("twice.link")
)

// The links' attributes (twice.link), shared by every link of their kind:
// the SDK copies what it keeps.
var (
	linkProducer   = []attribute.KeyValue{attrLink.String("producer")}
	linkPrevious   = []attribute.KeyValue{attrLink.String("previous")}
	linkRedelivery = []attribute.KeyValue{attrLink.String("redelivery")}
	linkDependency = []attribute.KeyValue{attrLink.String("dependency")}
)

// system is messaging.system's value.
const system = "twice"

// recentMax bounds the deliveries a Tracer remembers.
const recentMax = 10_000

// Tracer is a twice.Tracer that reports OpenTelemetry spans, following the
// messaging semantic conventions (messaging.system "twice", the queue as
// messaging.destination.name):
//
//   - a producer span per enqueue ("send"), with the kind, the job's id
//     and message id, or messaging.batch.message_count for many jobs;
//   - a consumer span per delivery ("process <queue>"), a child of the
//     enqueue's span, with twice.kind, twice.strategy, twice.epoch,
//     twice.attempt, and when it ends twice.marker (claimed, hit: a
//     duplicate the marker absorbed, or none) and twice.outcome
//     (completed, noop, retry, dead, snoozed, cancelled, requeued,
//     fenced: the lease fence refused it). It links to the enqueue, to
//     the job's previous attempt (on any node: the job keeps its last
//     attempt's trace; an attempt the fence refused, in this process
//     only), to the first delivery of a redelivered pair, and to the
//     tasks a workflow task waited for;
//   - a child span per named step ("step <name>"), with twice.step.status
//     ran, receipt (an earlier delivery's receipt, nothing ran) or failed.
//
// The enqueue's trace context reaches the job through its metadata: set
// Inject as twice.Config.EnqueueMetadata beside the Tracer. A handler's
// context carries its delivery's span, and the enqueuer's baggage.
type Tracer struct {
	tracer trace.Tracer

	mu sync.Mutex
	// recent is the last delivery started in this process, by job id, so
	// a later attempt links to one whose outcome the fence refused.
	recent map[int64]recentDelivery
}

type recentDelivery struct {
	epoch int64
	span  trace.SpanContext
}

var _ twice.Tracer = (*Tracer)(nil)

// NewTracer returns a Tracer reporting to tp (nil: otel.GetTracerProvider()).
func NewTracer(tp trace.TracerProvider) *Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Tracer{tracer: tp.Tracer(ScopeName), recent: map[int64]recentDelivery{}}
}

// StartEnqueue starts an enqueue's producer span.
func (t *Tracer) StartEnqueue(ctx context.Context, op string, n int) (context.Context, func([]*twicetype.JobRow, error)) {
	ctx, span := t.tracer.Start(ctx, "send", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attrSystem.String(system), attrOperationType.String("send"), attrOperation.String(op)))
	if n > 1 {
		span.SetAttributes(attrBatchCount.Int(n))
	}
	return ctx, func(jobs []*twicetype.JobRow, err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		if len(jobs) > 0 {
			enqueued(span, jobs)
		}
		span.End()
	}
}

// enqueued describes the stored jobs on their enqueue's span: the queue
// and kind when they share one, the id of a single job.
func enqueued(span trace.Span, jobs []*twicetype.JobRow) {
	queue, kind := jobs[0].Queue, jobs[0].Kind
	for _, j := range jobs[1:] {
		if j.Queue != queue {
			queue = ""
		}
		if j.Kind != kind {
			kind = ""
		}
	}
	if queue != "" {
		span.SetName("send " + queue)
		span.SetAttributes(attrDestination.String(queue))
	}
	if kind != "" {
		span.SetAttributes(attrKind.String(kind))
	}
	if len(jobs) == 1 {
		span.SetAttributes(attrMessageID.String(jobs[0].MessageID), attrJobID.Int64(jobs[0].ID))
	}
}

// StartDelivery starts a delivery's consumer span.
func (t *Tracer) StartDelivery(ctx context.Context, job *twicetype.JobRow, s twice.Strategy, earlier context.Context) (context.Context, twice.DeliverySpan) {
	if _, ok := job.Metadata["baggage"]; ok {
		ctx = propagation.Baggage{}.Extract(ctx, propagation.MapCarrier(job.Metadata))
	}
	producer := parseTraceparent(job.Metadata["traceparent"])
	links := make([]trace.Link, 0, 4)
	link := func(sc trace.SpanContext, what []attribute.KeyValue) {
		if !sc.IsValid() {
			return
		}
		for _, l := range links {
			if l.SpanContext.SpanID() == sc.SpanID() {
				return
			}
		}
		links = append(links, trace.Link{SpanContext: sc, Attributes: what})
	}
	link(producer, linkProducer)
	if earlier != nil {
		link(trace.SpanContextFromContext(earlier), linkRedelivery)
	}
	if job.Trace != "" {
		stored := linkPrevious
		if job.Epoch <= 1 {
			stored = linkDependency // a first delivery: the traces a workflow task's release carried
		}
		for tp := range strings.SplitSeq(job.Trace, ",") {
			link(parseTraceparent(tp), stored)
		}
	}
	t.mu.Lock()
	if r, ok := t.recent[job.ID]; ok && r.epoch < job.Epoch {
		link(r.span, linkPrevious)
	}
	t.mu.Unlock()

	parent := ctx
	if producer.IsValid() {
		parent = trace.ContextWithRemoteSpanContext(ctx, producer)
	}
	// What a sampler may look at goes in at the start; the rest with the
	// outcome, in one write.
	ctx, span := t.tracer.Start(parent, "process "+job.Queue, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...),
		trace.WithAttributes(attrSystem.String(system), attrOperationType.String("process"), attrDestination.String(job.Queue),
			attrKind.String(job.Kind)))
	sc := span.SpanContext()
	if earlier == nil { // a redelivered pair's second delivery is not the attempt's own
		t.remember(job, sc)
	}
	return ctx, twice.DeliverySpan{Trace: traceparent(sc), End: func(end twice.DeliveryEnd) {
		span.SetAttributes(attrOperation.String("process"), attrMessageID.String(job.MessageID), attrJobID.Int64(job.ID),
			attrStrategy.String(s.String()), attrEpoch.Int64(job.Epoch), attrAttempt.Int(job.Attempt),
			attrMarker.String(end.Marker), attrOutcome.String(end.Outcome))
		switch end.Outcome {
		case "retry", "dead", "failed", "fenced", "unrecorded":
			if end.Err != nil {
				span.RecordError(end.Err)
			}
			span.SetStatus(codes.Error, end.Outcome)
		}
		span.End()
		switch end.Outcome {
		case "completed", "noop", "dead", "cancelled":
			t.forget(job.ID, sc)
		}
	}}
}

// remember records a delivery's span as the job's last in this process.
func (t *Tracer) remember(job *twicetype.JobRow, sc trace.SpanContext) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.recent) >= recentMax {
		clear(t.recent) // jobs that moved to other nodes; their stored trace still links
	}
	t.recent[job.ID] = recentDelivery{epoch: job.Epoch, span: sc}
}

// forget drops a finished job's delivery, unless a later one replaced it.
func (t *Tracer) forget(id int64, sc trace.SpanContext) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r, ok := t.recent[id]; ok && r.span.SpanID() == sc.SpanID() {
		delete(t.recent, id)
	}
}

// StartStep starts a named step's span.
func (t *Tracer) StartStep(ctx context.Context, name string, s twice.Strategy) (context.Context, func(string, error)) {
	ctx, span := t.tracer.Start(ctx, "step "+name, trace.WithAttributes(attrStep.String(name), attrStrategy.String(s.String())))
	return ctx, func(status string, err error) {
		span.SetAttributes(attrStepStatus.String(status))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, status)
		}
		span.End()
	}
}

// traceparent renders a span context in the W3C traceparent form, or ""
// for an invalid one.
func traceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	tid, sid := sc.TraceID(), sc.SpanID()
	var b [55]byte
	copy(b[:], "00-")
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags())})
	return string(b[:])
}

// parseTraceparent reads a W3C traceparent (version 00), or returns an
// invalid span context.
func parseTraceparent(s string) trace.SpanContext {
	if len(s) != 55 || s[:3] != "00-" || s[35] != '-' || s[52] != '-' {
		return trace.SpanContext{}
	}
	var (
		tid   trace.TraceID
		sid   trace.SpanID
		flags [1]byte
	)
	_, err1 := hex.Decode(tid[:], []byte(s[3:35]))
	_, err2 := hex.Decode(sid[:], []byte(s[36:52]))
	_, err3 := hex.Decode(flags[:], []byte(s[53:55]))
	if err1 != nil || err2 != nil || err3 != nil {
		return trace.SpanContext{}
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
		TraceFlags: trace.TraceFlags(flags[0]), Remote: true})
}
