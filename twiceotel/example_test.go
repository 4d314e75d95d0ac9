package twiceotel_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twiceotel"
	"github.com/twicejobs/twice/twicesqlite"
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

type receipt struct{ OrderID int64 }

func (receipt) Kind() string { return "example.receipt.v1" }

// NewTracer gives every enqueue and every delivery a span. Here a job is
// delivered twice on purpose (Config.Redeliver): one delivery claims the
// marker and runs the effect, the other finds the claim and does nothing.
func ExampleNewTracer() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "twice-example")
	defer os.RemoveAll(dir)
	store, err := twicesqlite.Open(ctx, filepath.Join(dir, "twice.db"))
	if err != nil {
		panic(err)
	}
	defer store.Close()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))

	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[receipt](func(context.Context, *twice.Job[receipt]) error {
		return nil // send the receipt
	}), &twice.KindOpts{Strategy: twice.ClaimAfter})
	client, err := twice.NewClient(store, twice.Config{Registry: reg, Redeliver: true,
		Tracer: twiceotel.NewTracer(tp), EnqueueMetadata: twiceotel.Inject,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = client.Shutdown(ctx, 5*time.Second) }()
	if _, err := client.Enqueue(ctx, receipt{OrderID: 42}, nil); err != nil {
		panic(err)
	}
	for len(spans.Ended()) < 3 {
		time.Sleep(10 * time.Millisecond)
	}
	for _, s := range spans.Ended() {
		line := s.Name()
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case "twice.marker", "twice.outcome":
				line += " " + string(kv.Key) + "=" + kv.Value.AsString()
			}
		}
		fmt.Println(line, "links:", len(s.Links()))
	}
	// Output:
	// send default links: 0
	// process default twice.marker=claimed twice.outcome=completed links: 1
	// process default twice.marker=hit twice.outcome=noop links: 2
}
