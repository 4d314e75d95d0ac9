package twiceotel_test

import (
	"context"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/twicejobs/twice/bench"
	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/twiceotel"
	"github.com/twicejobs/twice/twicepg"
)

// BenchmarkBurndownTelemetry: a burn-down of b.N no-op jobs (at least
// 1,000) by 2,000 workers on PostgreSQL, with no telemetry, with Metrics
// on an SDK meter provider whose reader is never collected, and with
// Metrics and a Tracer on an SDK tracer provider that batches to a no-op
// exporter (the cost of recording, not of exporting), sampling every
// trace and, as production often does, one in ten.
// Run it with -count to alternate the sides, so the machine's load falls
// on all alike.
func BenchmarkBurndownTelemetry(b *testing.B) {
	for _, side := range []string{"off", "metrics", "metrics+traces", "metrics+traces@10%"} {
		b.Run("otel="+side, func(b *testing.B) {
			u, _ := pgtest.Schema(b, "bench_otel")
			store, err := twicepg.Open(context.Background(), pgtest.WithParams(b, u, map[string]string{"pool_max_conns": "20"}))
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			cfg := bench.Config{Store: store, Mode: bench.ModeBurndown, Jobs: max(b.N, 1000), Workers: 2000}
			if side != "off" {
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				defer func() { _ = mp.Shutdown(context.Background()) }()
				if cfg.Observer, err = twiceotel.NewMetrics(mp, store); err != nil {
					b.Fatal(err)
				}
			}
			if strings.HasPrefix(side, "metrics+traces") {
				sampler := sdktrace.AlwaysSample()
				if strings.HasSuffix(side, "@10%") {
					sampler = sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.1))
				}
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
				defer func() { _ = tp.Shutdown(context.Background()) }()
				cfg.Tracer, cfg.EnqueueMetadata = twiceotel.NewTracer(tp), twiceotel.Inject
			}
			res, err := bench.Run(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(res.JobsPerS, "jobs/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
