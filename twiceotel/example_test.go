package twiceotel_test

import (
	"context"
	"fmt"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twiceotel"
)

// Inject turns the enqueuer's span context into job metadata; Extract (which
// Middleware calls) turns it back into a context for the handler.
func ExampleInject() {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c},
		SpanID:     trace.SpanID{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31},
		TraceFlags: trace.FlagsSampled,
	})
	metadata := twiceotel.Inject(trace.ContextWithSpanContext(context.Background(), sc))
	fmt.Println(metadata["traceparent"])

	handlerCtx := twiceotel.Extract(context.Background(), metadata)
	fmt.Println(trace.SpanContextFromContext(handlerCtx).TraceID())
	// Output:
	// 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01
	// 0af7651916cd43dd8448eb211c80319c
}

// NewMetrics reports what happens to jobs through the application's meter
// provider; here the SDK's in-memory reader shows the outcome counter.
func ExampleNewMetrics() {
	reader := sdkmetric.NewManualReader()
	metrics, err := twiceotel.NewMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), nil)
	if err != nil {
		panic(err)
	}
	// The runtime calls Observe (set metrics as twice.Config.Observer).
	metrics.Observe(twice.Event{Type: twice.EventDuplicate, Kind: "email.welcome.v1", Queue: "default"})

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
			outcome, _ := p.Attributes.Value("twice.outcome")
			fmt.Println(m.Name, outcome.AsString(), p.Value)
		}
	}
	// Output:
	// twice.job.outcomes duplicate 1
}
