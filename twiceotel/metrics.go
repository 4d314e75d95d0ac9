package twiceotel

import (
	"context"
	"errors"
	"fmt"
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
					o.Observe(int64(q.Due), metric.WithAttributes(attrSystem.String("twice"), attrDestination.String(q.Queue)))
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
	base := []attribute.KeyValue{attrSystem.String("twice"), attrDestination.String(e.Queue), attrKind.String(e.Kind)}
	switch e.Type {
	case twice.EventEnqueued:
		m.sent.Add(ctx, 1, metric.WithAttributes(append(base, attrOperation.String("send"))...))
		return
	case twice.EventStarted:
		m.consumed.Add(ctx, 1, metric.WithAttributes(append(base, attrOperation.String("process"))...))
		if e.FirstStart {
			m.wait.Record(ctx, e.Wait.Seconds(), metric.WithAttributes(base...))
		}
		return
	}
	outcome, ok := outcomeOf[e.Type]
	if !ok {
		return
	}
	attrs := metric.WithAttributes(append(base, attrOutcome.String(outcome))...)
	m.outcomes.Add(ctx, 1, attrs)
	switch e.Type {
	case twice.EventCompleted, twice.EventRetried, twice.EventDead, twice.EventCancelled:
		m.process.Record(ctx, e.Run.Seconds(), metric.WithAttributes(append(base, attrOperation.String("process"), attrOutcome.String(outcome))...))
	}
}
