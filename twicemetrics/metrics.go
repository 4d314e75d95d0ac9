// Package twicemetrics exports twice's Prometheus metrics: per kind and
// queue, the jobs enqueued, started, completed, retried, dead-lettered,
// skipped by a kill switch and absorbed by a marker as duplicates, with
// run-time and enqueue-to-start histograms; and, read from the store at
// each scrape, the depth and oldest-job age of each queue and the orphaned
// jobs; and, once ReportLimits is given the client, the flow-control usage
// of each limited kind (slots in use, throttled jobs); and, once
// ReportWaitReasons is, why the due jobs are not running.
//
//	m := twicemetrics.New(store)
//	client, err := twice.NewClient(store, twice.Config{Registry: reg, Observer: m})
//	m.ReportLimits(client)
//	m.ReportWaitReasons(client)
//	http.Handle("/metrics", m.Handler())
package twicemetrics

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/ops"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// ScrapeTimeout bounds the store queries one scrape makes.
const ScrapeTimeout = 5 * time.Second

// Metrics is a twice.Observer that counts job events, and a
// prometheus.Collector of the store's queue gauges.
type Metrics struct {
	store    QueueReader
	counters map[twice.EventType]*prometheus.CounterVec
	run      *prometheus.HistogramVec
	wait     *prometheus.HistogramVec
	dispatch *prometheus.HistogramVec
	registry *prometheus.Registry

	depthDesc, scheduledDesc, ageDesc, orphanDesc *prometheus.Desc
	pausedDesc, strandedDesc                      *prometheus.Desc

	limits                                            atomic.Pointer[LimitLister]
	throttledDesc, slotsUsedDesc, slotsDesc, rateDesc *prometheus.Desc
	waitingDesc                                       *prometheus.Desc

	whys       atomic.Pointer[WaitCounter]
	notRunDesc *prometheus.Desc
}

// QueueReader is what the queue gauges read of a store. Every twice store
// (twicesqlite's, twicepg's, or a transaction's executor) is one.
type QueueReader interface {
	JobQueueStats(ctx context.Context, p *twicestore.JobQueueStatsParams) (*twicestore.JobQueueStatsResult, error)
	JobOrphans(ctx context.Context, p *twicestore.JobOrphansParams) (*twicestore.JobOrphansResult, error)
	QueueList(ctx context.Context, p *twicestore.QueueListParams) (*twicestore.QueueListResult, error)
	QueueStranded(ctx context.Context, p *twicestore.QueueStrandedParams) (*twicestore.QueueStrandedResult, error)
	JobCount(ctx context.Context, p *twicestore.JobCountParams) (*twicestore.JobCountResult, error)
}

// LimitLister reports the flow-control usage of the limited kinds: a
// *twice.Client, whose registry states the limits.
type LimitLister interface {
	LimitList(ctx context.Context) ([]twice.LimitUsage, error)
}

// ReportLimits makes each scrape report the limited kinds of l (usually
// the client the Metrics observes): twice_jobs_throttled, the due jobs a
// limit holds back, waiting for a slot; twice_limit_slots_used, the
// running jobs of a kind with a concurrency limit, and twice_limit_slots,
// its global limit; twice_limit_rate_used, the starts in a rate-limited
// kind's current window. Without it no limit gauge is reported.
func (m *Metrics) ReportLimits(l LimitLister) { m.limits.Store(&l) }

// WaitCounter counts the due jobs that are not running by why they are
// not: a *twice.Client, which reads the kill switches, pauses, catalog and
// limits that say so.
type WaitCounter interface {
	JobWaitCounts(ctx context.Context) ([]twice.WaitCount, error)
}

// ReportWaitReasons makes each scrape report twice_jobs_not_running, the
// due jobs that are not running, by kind, queue and reason: held (a kill
// switch), paused (the queue), orphaned (no live worker for the kind or
// the queue), throttled (a limit) or due (a worker starts them at its next
// fetch), as twice.Client.JobWaitCounts counts them from counts by kind,
// never by reading each job. Without it the gauge is not reported.
func (m *Metrics) ReportWaitReasons(w WaitCounter) { m.whys.Store(&w) }

// New returns the metrics of the jobs in store, registered in a registry
// of their own (with the Go and process collectors) that Handler serves.
// Pass the Metrics as twice.Config.Observer to count the runtime's events.
func New(store QueueReader) *Metrics {
	labels := []string{"kind", "queue"}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "twice", Name: name, Help: help}, labels)
	}
	m := &Metrics{
		store: store,
		counters: map[twice.EventType]*prometheus.CounterVec{
			twice.EventEnqueued:  counter("jobs_enqueued_total", "Jobs inserted (unique-key duplicates excluded)."),
			twice.EventStarted:   counter("jobs_started_total", "Attempts started."),
			twice.EventCompleted: counter("jobs_completed_total", "Jobs completed, no-ops included."),
			twice.EventRetried:   counter("jobs_retried_total", "Failed attempts that will run again."),
			twice.EventDead:      counter("jobs_dead_total", "Jobs dead-lettered."),
			twice.EventSkipped:   counter("jobs_skipped_total", "Jobs held and recurring ticks skipped because their kind is switched off."),
			twice.EventDuplicate: counter("jobs_duplicates_total", "Deliveries a marker absorbed: already processed, completed as no-ops."),
			twice.EventCancelled: counter("jobs_cancelled_total", "Running jobs that ended cancelled, by an operator or by their handler."),
			twice.EventFenced:    counter("jobs_fenced_total", "Attempts whose outcome the lease fence refused: the job had left their lease, and nothing was written."),
		},
		run: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "twice", Name: "job_run_seconds", Help: "How long attempts ran, by outcome's kind and queue.",
			Buckets: prometheus.ExponentialBuckets(0.005, 4, 10),
		}, labels),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "twice", Name: "job_wait_seconds", Help: "How long jobs waited from when they were due (enqueued, or delayed until) to their first start.",
			Buckets: prometheus.ExponentialBuckets(0.005, 4, 10),
		}, labels),
		dispatch: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "twice", Name: "job_fetch_to_start_seconds",
			Help:    "How long attempts took from the start of the fetch that leased them to their start: the fetch's round trip and the wait for a worker.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, labels),
		registry:      prometheus.NewRegistry(),
		depthDesc:     prometheus.NewDesc("twice_queue_depth", "Available jobs due now, by queue.", []string{"queue"}, nil),
		scheduledDesc: prometheus.NewDesc("twice_queue_scheduled", "Available jobs due later (delays, backoffs, snoozes), by queue.", []string{"queue"}, nil),
		ageDesc:       prometheus.NewDesc("twice_queue_oldest_age_seconds", "How long the oldest due job of the queue has waited; 0 when none is due.", []string{"queue"}, nil),
		orphanDesc:    prometheus.NewDesc("twice_orphaned_jobs", "Available jobs whose kind no live worker handles.", []string{"kind", "queue"}, nil),
		pausedDesc:    prometheus.NewDesc("twice_queue_paused", "1 while the queue is paused (QueuePause): its jobs wait on purpose, they are not stuck; else 0.", []string{"queue"}, nil),
		strandedDesc:  prometheus.NewDesc("twice_stranded_jobs", "Available jobs in a queue that no live worker serves.", []string{"queue"}, nil),
		throttledDesc: prometheus.NewDesc("twice_jobs_throttled", "Due jobs of a limited kind that a limit (global, per key, rate) holds back: they wait for a slot, they are not stuck.", []string{"kind"}, nil),
		slotsUsedDesc: prometheus.NewDesc("twice_limit_slots_used", "Running jobs of a kind with a concurrency limit, across all nodes.", []string{"kind"}, nil),
		slotsDesc:     prometheus.NewDesc("twice_limit_slots", "The global concurrency limit of a kind.", []string{"kind"}, nil),
		rateDesc:      prometheus.NewDesc("twice_limit_rate_used", "Starts of a rate-limited kind in its current window.", []string{"kind"}, nil),
		notRunDesc: prometheus.NewDesc("twice_jobs_not_running",
			"Due jobs that are not running, by why: held (kill switch), paused (queue), orphaned (no live worker), throttled (limit), due (next fetch).",
			[]string{"kind", "queue", "reason"}, nil),
		waitingDesc: prometheus.NewDesc("twice_jobs_waiting", "Jobs parked by their handler until a signal or a timer (twice.AwaitSignal, twice.Sleep): they hold no worker and are not stuck.", []string{"kind", "queue"}, nil),
	}
	m.registry.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Observe counts one runtime event; it implements twice.Observer.
func (m *Metrics) Observe(e twice.Event) {
	if c := m.counters[e.Type]; c != nil {
		c.WithLabelValues(e.Kind, e.Queue).Inc()
	}
	switch e.Type {
	case twice.EventStarted:
		m.dispatch.WithLabelValues(e.Kind, e.Queue).Observe(e.SinceFetch.Seconds())
		if e.FirstStart {
			m.wait.WithLabelValues(e.Kind, e.Queue).Observe(e.Wait.Seconds())
		}
	case twice.EventCompleted, twice.EventRetried, twice.EventDead:
		if e.Run > 0 {
			m.run.WithLabelValues(e.Kind, e.Queue).Observe(e.Run.Seconds())
		}
	}
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.counters {
		c.Describe(ch)
	}
	m.run.Describe(ch)
	m.wait.Describe(ch)
	m.dispatch.Describe(ch)
	ch <- m.depthDesc
	ch <- m.scheduledDesc
	ch <- m.ageDesc
	ch <- m.orphanDesc
	ch <- m.pausedDesc
	ch <- m.strandedDesc
	ch <- m.throttledDesc
	ch <- m.slotsUsedDesc
	ch <- m.slotsDesc
	ch <- m.rateDesc
	ch <- m.waitingDesc
	ch <- m.notRunDesc
}

// Collect implements prometheus.Collector: the counters and histograms,
// and the gauges read from the store now. A store error fails the scrape
// rather than reporting stale or zero gauges.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.counters {
		c.Collect(ch)
	}
	m.run.Collect(ch)
	m.wait.Collect(ch)
	m.dispatch.Collect(ch)

	ctx, cancel := context.WithTimeout(context.Background(), ScrapeTimeout)
	defer cancel()
	now := time.Now()
	qs, err := m.store.JobQueueStats(ctx, &twicestore.JobQueueStatsParams{Now: now})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(m.depthDesc, err)
	} else {
		for _, q := range qs.Queues {
			ch <- prometheus.MustNewConstMetric(m.depthDesc, prometheus.GaugeValue, float64(q.Due), q.Queue)
			ch <- prometheus.MustNewConstMetric(m.scheduledDesc, prometheus.GaugeValue, float64(q.Scheduled), q.Queue)
			age := 0.0
			if !q.OldestDue.IsZero() {
				age = max(now.Sub(q.OldestDue).Seconds(), 0)
			}
			ch <- prometheus.MustNewConstMetric(m.ageDesc, prometheus.GaugeValue, age, q.Queue)
		}
	}
	m.collectLimits(ctx, ch)
	m.collectQueues(ctx, ch, now)
	m.collectWaiting(ctx, ch)
	m.collectWaitReasons(ctx, ch)
	orphans, err := m.store.JobOrphans(ctx, &twicestore.JobOrphansParams{AliveSince: now.Add(-ops.NodeAliveWindow)})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(m.orphanDesc, err)
		return
	}
	for _, o := range orphans.Kinds {
		ch <- prometheus.MustNewConstMetric(m.orphanDesc, prometheus.GaugeValue, float64(o.Count), o.Kind, o.Queue)
	}
}

// collectWaiting reports the waiting jobs by kind and queue.
func (m *Metrics) collectWaiting(ctx context.Context, ch chan<- prometheus.Metric) {
	res, err := m.store.JobCount(ctx, &twicestore.JobCountParams{Filter: twicestore.JobFilter{State: twicetype.JobStateWaiting}})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(m.waitingDesc, err)
		return
	}
	for _, c := range res.Counts {
		ch <- prometheus.MustNewConstMetric(m.waitingDesc, prometheus.GaugeValue, float64(c.Count), c.Kind, c.Queue)
	}
}

// collectWaitReasons reports why the due jobs are not running, if
// ReportWaitReasons was given a counter.
func (m *Metrics) collectWaitReasons(ctx context.Context, ch chan<- prometheus.Metric) {
	w := m.whys.Load()
	if w == nil {
		return
	}
	counts, err := (*w).JobWaitCounts(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(m.notRunDesc, err)
		return
	}
	for _, c := range counts {
		ch <- prometheus.MustNewConstMetric(m.notRunDesc, prometheus.GaugeValue, float64(c.Count), c.Kind, c.Queue, string(c.Code))
	}
}

// collectQueues reports which queues are paused and which hold jobs no
// live worker serves (stranded), so neither reads as a stuck queue.
func (m *Metrics) collectQueues(ctx context.Context, ch chan<- prometheus.Metric, now time.Time) {
	queues, err := m.store.QueueList(ctx, &twicestore.QueueListParams{Now: now})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(m.pausedDesc, err)
	} else {
		for _, q := range queues.Queues {
			paused := 0.0
			if q.Paused {
				paused = 1
			}
			ch <- prometheus.MustNewConstMetric(m.pausedDesc, prometheus.GaugeValue, paused, q.Name)
		}
	}
	stranded, err := m.store.QueueStranded(ctx, &twicestore.QueueStrandedParams{AliveSince: now.Add(-ops.NodeAliveWindow)})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(m.strandedDesc, err)
		return
	}
	for _, q := range stranded.Queues {
		ch <- prometheus.MustNewConstMetric(m.strandedDesc, prometheus.GaugeValue, float64(q.Count), q.Queue)
	}
}

// collectLimits reports the limit gauges of ReportLimits' lister, if any.
func (m *Metrics) collectLimits(ctx context.Context, ch chan<- prometheus.Metric) {
	l := m.limits.Load()
	if l == nil {
		return
	}
	usage, err := (*l).LimitList(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(m.throttledDesc, err)
		return
	}
	for _, u := range usage {
		ch <- prometheus.MustNewConstMetric(m.throttledDesc, prometheus.GaugeValue, float64(u.Throttled), u.Kind)
		if u.Limit.Global > 0 || u.Limit.PerKey > 0 {
			ch <- prometheus.MustNewConstMetric(m.slotsUsedDesc, prometheus.GaugeValue, float64(u.Running), u.Kind)
		}
		if u.Limit.Global > 0 {
			ch <- prometheus.MustNewConstMetric(m.slotsDesc, prometheus.GaugeValue, float64(u.Limit.Global), u.Kind)
		}
		if u.Limit.Rate.Limit > 0 {
			ch <- prometheus.MustNewConstMetric(m.rateDesc, prometheus.GaugeValue, float64(u.RateUsed), u.Kind)
		}
	}
}
