package twiceotel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twiceotel"
	"github.com/twicejobs/twice/twicetype"
)

// BenchmarkDeliverySpan is the Tracer's cost per delivery (start and end)
// on an always-sampling provider that batches to a no-op exporter, beside
// a bare SDK span for scale.
func BenchmarkDeliverySpan(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	job := &twicetype.JobRow{ID: 1, Kind: "k.v1", Queue: "default", Epoch: 1, Attempt: 1, MessageID: "m",
		Metadata: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	b.Run("bare-sdk", func(b *testing.B) {
		tr := tp.Tracer("x")
		for b.Loop() {
			_, s := tr.Start(context.Background(), "process default")
			s.End()
		}
	})
	b.Run("bare-sdk-12-attrs", func(b *testing.B) {
		tr := tp.Tracer("x")
		for b.Loop() {
			_, s := tr.Start(context.Background(), "process default", trace.WithAttributes(
				attribute.String("a", "x"), attribute.String("b", "x"), attribute.String("c", "x"), attribute.String("d", "x")))
			s.SetAttributes(attribute.String("e", "x"), attribute.String("f", "x"), attribute.Int64("g", 1),
				attribute.String("h", "x"), attribute.Int64("i", 1), attribute.Int("j", 1), attribute.String("k", "x"), attribute.String("l", "x"))
			s.End()
		}
	})
	b.Run("twiceotel", func(b *testing.B) {
		tracer := twiceotel.NewTracer(tp)
		for b.Loop() {
			_, span := tracer.StartDelivery(context.Background(), job, twice.None, nil)
			span.End(twice.DeliveryEnd{Marker: "none", Outcome: "completed"})
		}
	})
}
