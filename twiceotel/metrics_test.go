package twiceotel_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twiceotel"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

type metered struct{ N int }

func (metered) Kind() string { return "otel.metered.v1" }

// collect reads every metric of reader into one map: a sum's or a gauge's
// points by the attribute set, a histogram's counts likewise.
func collect(t *testing.T, reader *sdkmetric.ManualReader) map[string]map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			points := map[string]int64{}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					points[p.Attributes.Encoded(attribute.DefaultEncoder())] = p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					points[p.Attributes.Encoded(attribute.DefaultEncoder())] = p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					points[p.Attributes.Encoded(attribute.DefaultEncoder())] = int64(p.Count)
				}
			}
			out[m.Name] = points
		}
	}
	return out
}

// attrs is the key collect files an attribute set's points under.
func attrs(kv ...attribute.KeyValue) string {
	set := attribute.NewSet(kv...)
	return set.Encoded(attribute.DefaultEncoder())
}

// TestMetricsOfARealRuntime runs jobs through a real runtime on SQLite,
// redelivered (Config.Redeliver), with the OTel SDK's in-memory reader, and
// checks what it collected: every enqueue and attempt, the duplicates the
// markers absorbed, a failure retried then dead, and the queue depth the
// store reports.
func TestMetricsOfARealRuntime(t *testing.T) {
	ctx := context.Background()
	store, err := twicesqlite.Open(ctx, filepath.Join(t.TempDir(), "twice.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(ctx) }()
	m, err := twiceotel.NewMetrics(mp, store)
	if err != nil {
		t.Fatal(err)
	}

	// Before any worker: 3 jobs due in the default queue, one scheduled.
	enqueuer, err := twice.NewClient(store, twice.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := enqueuer.EnqueueJSON(ctx, metered{}.Kind(), []byte(`{"N": 1}`), &twice.EnqueueOpts{AllowUnknownKind: true, MessageID: string(rune('a' + i))}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := enqueuer.EnqueueJSON(ctx, metered{}.Kind(), []byte(`{"N": 2}`), &twice.EnqueueOpts{AllowUnknownKind: true, Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	base := []attribute.KeyValue{attribute.String("messaging.system", "twice"), attribute.String("messaging.destination.name", "default")}
	if got := collect(t, reader)["twice.queue.depth"][attrs(base...)]; got != 3 {
		t.Fatalf("queue depth %d, want 3 due (the scheduled one is not)", got)
	}
	if _, err := store.JobDelete(ctx, &twicestore.JobBulkParams{Filter: twicestore.JobFilter{Kind: metered{}.Kind()}}); err != nil {
		t.Fatal(err)
	}

	reg := twice.NewRegistry()
	var calls atomic.Int32
	twice.MustRegister(reg, twice.HandlerFunc[metered](func(_ context.Context, j *twice.Job[metered]) error {
		calls.Add(1)
		if j.Args.N < 0 {
			return errors.New("negative")
		}
		return nil
	}), &twice.KindOpts{Strategy: twice.ClaimAfter, MaxAttempts: 2})
	worker, err := twice.NewClient(store, twice.Config{Registry: reg, Observer: m, Redeliver: true, PollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := worker.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = worker.Shutdown(ctx, 5*time.Second) }()
	ok, err := worker.Enqueue(ctx, metered{N: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	bad, err := worker.Enqueue(ctx, metered{N: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{ok.Job.ID, bad.Job.ID} {
		waitfor.Cond(t, "the job to finish", func() bool {
			row, err := store.JobGet(ctx, &twicestore.JobGetParams{ID: id})
			return err == nil && (row.State == twicetype.JobStateCompleted || row.State == twicetype.JobStateDead)
		}, func() string { return "" })
	}

	kind := append(base, attribute.String("twice.kind", metered{}.Kind()))
	with := func(kv ...attribute.KeyValue) string {
		return attrs(append(append([]attribute.KeyValue(nil), kind...), kv...)...)
	}
	outcome := func(o string) string { return with(attribute.String("twice.outcome", o)) }
	want := map[string]map[string]int64{
		// 2 jobs enqueued here (the 4 before were by the enqueuer, which has no observer).
		"messaging.client.sent.messages": {with(attribute.String("messaging.operation.name", "send")): 2},
		// Each attempt of a redelivered job writes one outcome; the
		// delivery the marker absorbed is a duplicate on top of it.
		"twice.job.outcomes": {
			outcome("completed"): 1,
			outcome("duplicate"): 1,
			outcome("retried"):   1,
			outcome("dead"):      1,
		},
		// An attempt starts once, however many times it is delivered: the
		// good job's one, the bad job's two.
		"messaging.client.consumed.messages": {with(attribute.String("messaging.operation.name", "process")): 3},
	}
	got := collect(t, reader)
	waitfor.Cond(t, "the outcomes to be observed", func() bool {
		got = collect(t, reader)
		o := got["twice.job.outcomes"]
		return o[outcome("completed")] >= 1 && o[outcome("dead")] >= 1
	}, func() string { return fmt.Sprint(got) })
	for name, points := range want {
		for set, n := range points {
			if got[name][set] != n {
				t.Errorf("%s %v = %d, want %d (all: %v)", name, set, got[name][set], n, got[name])
			}
		}
	}
	if n := got["twice.job.wait"][attrs(kind...)]; n != 2 {
		t.Errorf("%d first-start waits recorded, want 2", n)
	}
}

// TestMetricsCountFencedAndSkipped: the outcomes that never reach a
// handler are counted too.
func TestMetricsCountFencedAndSkipped(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	m, err := twiceotel.NewMetrics(mp, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.Observe(twice.Event{Type: twice.EventFenced, Kind: "k.v1", Queue: "q"})
	m.Observe(twice.Event{Type: twice.EventSkipped, Kind: "k.v1", Queue: "q"})
	got := collect(t, reader)
	for _, o := range []string{"fenced", "skipped"} {
		set := attrs(attribute.String("messaging.system", "twice"), attribute.String("messaging.destination.name", "q"),
			attribute.String("twice.kind", "k.v1"), attribute.String("twice.outcome", o))
		if got["twice.job.outcomes"][set] != 1 {
			t.Errorf("outcome %s counted %d times, want 1 (all: %v)", o, got["twice.job.outcomes"][set], got["twice.job.outcomes"])
		}
	}
	if _, ok := got["twice.queue.depth"]; ok {
		t.Error("a queue depth gauge without a store")
	}
}
