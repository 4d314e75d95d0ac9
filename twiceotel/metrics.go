package twiceotel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
)

// ScopeName is the instrumentation scope of twice's metrics.
const ScopeName = "github.com/twicejobs/twice"

// Attribute keys of twice's metrics: the messaging semantic conventions'
// where they have one, twice's own otherwise.
const (
	attrSystem      = attribute.Key("messaging.system")
	attrOperation   = attribute.Key("messaging.operation.name")
	attrDestination = attribute.Key("messaging.destination.name")
	attrKind        = attribute.Key("twice.kind")
	attrOutcome     = attribute.Key("twice.outcome")
)

// QueueReader is what the queue depth gauge reads of a store: every twice
// store (twicesqlite's, twicepg's) is one.
type QueueReader interface {
	JobQueueStats(ctx context.Context, p *twicestore.JobQueueStatsParams) (*twicestore.JobQueueStatsResult, error)
}

// Metrics is a twice.Observer that reports what happens to jobs as
// OpenTelemetry metrics, each with messaging.system "twice", the queue as
// messaging.destination.name, and the kind as twice.kind:
//
//   - messaging.client.sent.messages: jobs enqueued;
//   - messaging.client.consumed.messages: attempts started;
//   - messaging.process.duration (s): how long attempts ran, by
//     twice.outcome (completed, retried, dead, cancelled);
//   - twice.job.outcomes: every outcome, by twice.outcome: completed,
//     retried, dead, cancelled, duplicate (a marker absorbed the delivery:
//     the effect did not run twice), skipped (its kill switch is off) and
//     fenced (the lease fence refused a stale attempt's outcome);
//   - twice.job.wait (s): how long a job waited from due to its first
//     start;
//   - twice.queue.depth: due jobs per queue, read from the store at each
//     collection (only when NewMetrics is given a store).
//
// Set it as twice.Config.Observer (or call its Observe from your own).
type Metrics struct {
	sent, consumed, outcomes metric.Int64Counter
	process, wait            metric.Float64Histogram
	// sets caches each attribute set by attrKey: building a set sorts and
	// hashes its attributes, which on every event cost a busy worker a
	// sixth of its throughput.
	sets sync.Map // attrKey -> metric.MeasurementOption
}

// attrKey names one attribute set of Observe: its kind, queue, operation
// and outcome (empty when the set has none).
type attrKey struct{ kind, queue, op, outcome string }

// attrs returns the attribute set of k, built once.
func (m *Metrics) attrs(k attrKey) metric.MeasurementOption {
	if o, ok := m.sets.Load(k); ok {
		return o.(metric.MeasurementOption)
	}
	kv := []attribute.KeyValue{attrSystem.String(system), attrDestination.String(k.queue), attrKind.String(k.kind)}
	if k.op != "" {
		kv = append(kv, attrOperation.String(k.op))
	}
	if k.outcome != "" {
		kv = append(kv, attrOutcome.String(k.outcome))
	}
	o, _ := m.sets.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(kv...)))
	return o.(metric.MeasurementOption)
}

// NewMetrics returns the metrics of twice on the meter provider mp (the
// global one from otel.GetMeterProvider() when nil, which is a no-op until
// the application sets one). With store set, a collection also reads each
// queue's due jobs from it.
func NewMetrics(mp metric.MeterProvider, store QueueReader) (*Metrics, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(ScopeName)
	var m Metrics
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	histogram := func(name, desc string) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc))
		errs = append(errs, err)
		return h
	}
	m.sent = counter("messaging.client.sent.messages", "{message}", "Jobs enqueued.")
	m.consumed = counter("messaging.client.consumed.messages", "{message}", "Attempts started.")
	m.outcomes = counter("twice.job.outcomes", "{outcome}", "Outcomes of jobs: completed, retried, dead, cancelled, duplicate, skipped, fenced.")
	m.process = histogram("messaging.process.duration", "How long attempts ran.")
	m.wait = histogram("twice.job.wait", "How long jobs waited from due to their first start.")
	if store != nil {
		_, err := meter.Int64ObservableGauge("twice.queue.depth", metric.WithUnit("{job}"),
			metric.WithDescription("Due jobs waiting, per queue."),
			metric.WithInt64Callback(func(ctx context.Context, o metric.Int64Observer) error {
				res, err := store.JobQueueStats(ctx, &twicestore.JobQueueStatsParams{Now: time.Now()})
				if err != nil {
					return fmt.Errorf("twiceotel: read queue depth: %w", err)
				}
				for _, q := range res.Queues {
					o.Observe(int64(q.Due), metric.WithAttributes(attrSystem.String(system), attrDestination.String(q.Queue)))
				}
				return nil
			}))
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("twiceotel: create instruments: %w", err)
	}
	return &m, nil
}

// outcomeOf names the outcome an event reports, or "" for none.
var outcomeOf = map[twice.EventType]string{
	twice.EventCompleted: "completed",
	twice.EventRetried:   "retried",
	twice.EventDead:      "dead",
	twice.EventCancelled: "cancelled",
	twice.EventDuplicate: "duplicate",
	twice.EventSkipped:   "skipped",
	twice.EventFenced:    "fenced",
}

// Observe records e. It is a twice.Observer.
func (m *Metrics) Observe(e twice.Event) {
	ctx := context.Background()
	k := attrKey{kind: e.Kind, queue: e.Queue}
	switch e.Type {
	case twice.EventEnqueued:
		m.sent.Add(ctx, 1, m.attrs(attrKey{kind: e.Kind, queue: e.Queue, op: "send"}))
		return
	case twice.EventStarted:
		m.consumed.Add(ctx, 1, m.attrs(attrKey{kind: e.Kind, queue: e.Queue, op: "process"}))
		if e.FirstStart {
			m.wait.Record(ctx, e.Wait.Seconds(), m.attrs(k))
		}
		return
	}
	outcome, ok := outcomeOf[e.Type]
	if !ok {
		return
	}
	k.outcome = outcome
	m.outcomes.Add(ctx, 1, m.attrs(k))
	switch e.Type {
	case twice.EventCompleted, twice.EventRetried, twice.EventDead, twice.EventCancelled:
		k.op = "process"
		m.process.Record(ctx, e.Run.Seconds(), m.attrs(k))
	}
}
