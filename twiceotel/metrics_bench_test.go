package twiceotel_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/bench"
	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/twiceotel"
	"github.com/twicejobs/twice/twicepg"
)

// BenchmarkBurndownMetrics: a burn-down of b.N no-op jobs (at least 1,000)
// by 2,000 workers on PostgreSQL, with no observer and with Metrics on an
// SDK meter provider whose reader is never collected (the cost of
// recording, not of exporting). Run it with -count to alternate the two
// sides, so the machine's load falls on both alike.
func BenchmarkBurndownMetrics(b *testing.B) {
	for _, side := range []string{"off", "otel-metrics"} {
		b.Run("observer="+side, func(b *testing.B) {
			u, _ := pgtest.Schema(b, "bench_otel")
			store, err := twicepg.Open(context.Background(), pgtest.WithParams(b, u, map[string]string{"pool_max_conns": "20"}))
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			var observer twice.Observer
			if side != "off" {
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				defer func() { _ = mp.Shutdown(context.Background()) }()
				m, err := twiceotel.NewMetrics(mp, store)
				if err != nil {
					b.Fatal(err)
				}
				observer = m
			}
			res, err := bench.Run(context.Background(), bench.Config{Store: store, Mode: bench.ModeBurndown, Jobs: max(b.N, 1000),
				Workers: 2000, Observer: observer})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(res.JobsPerS, "jobs/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
