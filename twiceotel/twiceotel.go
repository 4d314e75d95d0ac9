// Package twiceotel carries the OpenTelemetry trace context of the code
// that enqueues a job into the job's handler, in the W3C Trace Context and
// Baggage formats: Inject stores the enqueuer's trace context in the job's
// metadata, and Middleware restores it into the handler's context, so the
// handler's spans join the trace that enqueued the job.
//
//	client, err := twice.NewClient(store, twice.Config{
//		Registry:        reg,
//		EnqueueMetadata: twiceotel.Inject,
//		Middleware:      []twice.Middleware{twiceotel.Middleware},
//	})
//
// The handler's context then carries the enqueuer's span context as a
// remote parent: start the handler's span from it with the application's
// tracer.
//
// Metrics is a twice.Observer that reports jobs as OpenTelemetry metrics
// (messaging semantic conventions, plus twice's outcomes: duplicates the
// markers absorbed, outcomes the lease fence refused) to the application's
// meter provider:
//
//	metrics, err := twiceotel.NewMetrics(nil, store) // nil: otel.GetMeterProvider()
//	client, err := twice.NewClient(store, twice.Config{Registry: reg, Observer: metrics})
package twiceotel

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/twicejobs/twice/twicetype"
)

// propagator writes and reads traceparent, tracestate and baggage.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Inject returns the trace context and baggage of ctx as job metadata, or
// nil when ctx carries neither. It is a twice.Config.EnqueueMetadata.
func Inject(ctx context.Context) map[string]string {
	carrier := propagation.MapCarrier{}
	propagator.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return nil
	}
	return carrier
}

// Extract returns ctx with the trace context and baggage stored in a
// job's metadata, if any.
func Extract(ctx context.Context, metadata map[string]string) context.Context {
	if len(metadata) == 0 {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier(metadata))
}

// Middleware restores the enqueuer's trace context into the handler's
// context. It is a twice.Middleware. Under a Tracer, whose delivery span
// the handler's context already carries, it adds the baggage only.
func Middleware(ctx context.Context, job *twicetype.JobRow, next func(ctx context.Context) error) error {
	if trace.SpanContextFromContext(ctx).IsValid() {
		return next(propagation.Baggage{}.Extract(ctx, propagation.MapCarrier(job.Metadata)))
	}
	return next(Extract(ctx, job.Metadata))
}
