package twiceotel_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twiceotel"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

type spanned struct{ N int }

func (spanned) Kind() string { return "otel.traced.v1" }

// spans is a recorder of ended spans, read by name and attribute.
type spans struct {
	rec *tracetest.SpanRecorder
	tp  *sdktrace.TracerProvider
}

func newSpans(t *testing.T) *spans {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &spans{rec: rec, tp: tp}
}

// where returns the ended spans whose name starts with prefix and that
// have every attribute in attrs (key=value).
func (s *spans) where(prefix string, attrs ...string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, sp := range s.rec.Ended() {
		if strings.HasPrefix(sp.Name(), prefix) && hasAttrs(sp, attrs...) {
			out = append(out, sp)
		}
	}
	return out
}

func hasAttrs(sp sdktrace.ReadOnlySpan, attrs ...string) bool {
	have := map[string]string{}
	for _, kv := range sp.Attributes() {
		have[string(kv.Key)] = kv.Value.String()
	}
	for _, a := range attrs {
		k, v, _ := strings.Cut(a, "=")
		if have[k] != v {
			return false
		}
	}
	return true
}

// describe lists every ended span, for failure messages.
func (s *spans) describe() string {
	var b strings.Builder
	for _, sp := range s.rec.Ended() {
		fmt.Fprintf(&b, "%s %s parent=%s", sp.Name(), sp.SpanContext().SpanID(), sp.Parent().SpanID())
		for _, kv := range sp.Attributes() {
			if strings.HasPrefix(string(kv.Key), "twice.") || strings.HasPrefix(string(kv.Key), "messaging.operation.name") || strings.HasPrefix(string(kv.Key), "messaging.batch") {
				fmt.Fprintf(&b, " %s=%s", kv.Key, kv.Value.String())
			}
		}
		for _, l := range sp.Links() {
			fmt.Fprintf(&b, " link(%s)=%s", l.Attributes[0].Value.String(), l.SpanContext.SpanID())
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// linksTo reports whether sp links to target as what.
func linksTo(sp, target sdktrace.ReadOnlySpan, what string) bool {
	for _, l := range sp.Links() {
		if l.SpanContext.SpanID() == target.SpanContext().SpanID() && hasLinkAttr(l, what) {
			return true
		}
	}
	return false
}

func hasLinkAttr(l sdktrace.Link, what string) bool {
	for _, kv := range l.Attributes {
		if string(kv.Key) == "twice.link" && kv.Value.AsString() == what {
			return true
		}
	}
	return false
}

// tracedRuntime is a SQLite store and a registry, for clients with a
// Tracer.
func tracedRuntime(t *testing.T) (*twicesqlite.Store, *twice.Registry) {
	t.Helper()
	store, err := twicesqlite.Open(context.Background(), filepath.Join(t.TempDir(), "twice.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store, twice.NewRegistry()
}

func startTraced(t *testing.T, store twicestore.Store, reg *twice.Registry, tracer *twiceotel.Tracer, set func(*twice.Config)) *twice.Client {
	t.Helper()
	cfg := twice.Config{Registry: reg, Tracer: tracer, EnqueueMetadata: twiceotel.Inject, PollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if set != nil {
		set(&cfg)
	}
	c, err := twice.NewClient(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Shutdown(context.Background(), 5*time.Second) })
	return c
}

func waitState(t *testing.T, store twicestore.Store, id int64, state twicetype.JobState) {
	t.Helper()
	waitfor.Cond(t, "job "+string(state), func() bool {
		row, err := store.JobGet(context.Background(), &twicestore.JobGetParams{ID: id})
		return err == nil && row.State == state
	}, func() string { return "" })
}

// TestTracerRedeliveredJob: a job delivered twice (Config.Redeliver) gives
// one delivery span that claimed the marker and one the marker absorbed,
// the second linked to the first, both children of the enqueue's producer
// span and linked to it; for ClaimAfter (always one after the other) and
// Transactional (sometimes both at once).
func TestTracerRedeliveredJob(t *testing.T) {
	for _, s := range []twice.Strategy{twice.ClaimAfter, twice.Transactional} {
		t.Run(s.String(), func(t *testing.T) {
			sp := newSpans(t)
			store, reg := tracedRuntime(t)
			var calls atomic.Int32
			twice.MustRegister(reg, twice.HandlerFunc[spanned](func(context.Context, *twice.Job[spanned]) error {
				calls.Add(1)
				return nil
			}), &twice.KindOpts{Strategy: s})
			c := startTraced(t, store, reg, twiceotel.NewTracer(sp.tp), func(c *twice.Config) { c.Redeliver = true })
			res, err := c.Enqueue(context.Background(), spanned{N: 1}, nil)
			if err != nil {
				t.Fatal(err)
			}
			waitState(t, store, res.Job.ID, twicetype.JobStateCompleted)
			waitfor.Cond(t, "two delivery spans", func() bool { return len(sp.where("process ")) == 2 }, sp.describe)

			producer := sp.where("send default", "twice.kind=otel.traced.v1", "messaging.operation.name=enqueue",
				fmt.Sprintf("twice.job.id=%d", res.Job.ID))
			claimed := sp.where("process default", "twice.marker=claimed", "twice.outcome=completed", "twice.strategy="+s.String())
			hit := sp.where("process default", "twice.marker=hit", "twice.outcome=noop", "twice.attempt=1", "twice.epoch=1")
			if len(producer) != 1 || len(claimed) != 1 || len(hit) != 1 {
				t.Fatalf("want one producer span, one claimed and one hit delivery, got %d, %d, %d:\n%s", len(producer), len(claimed), len(hit), sp.describe())
			}
			if !linksTo(claimed[0], hit[0], "redelivery") && !linksTo(hit[0], claimed[0], "redelivery") {
				t.Errorf("the two deliveries are not linked:\n%s", sp.describe())
			}
			for _, d := range []sdktrace.ReadOnlySpan{claimed[0], hit[0]} {
				if d.Parent().SpanID() != producer[0].SpanContext().SpanID() || !linksTo(d, producer[0], "producer") {
					t.Errorf("delivery %s is not the producer's child and linked to it:\n%s", d.SpanContext().SpanID(), sp.describe())
				}
				if d.SpanKind() != trace.SpanKindConsumer {
					t.Errorf("delivery span kind %s", d.SpanKind())
				}
			}
			if calls.Load() != 1 {
				t.Errorf("handler ran %d times, want 1", calls.Load())
			}
		})
	}
}

// TestTracerFencedAttemptAndPreviousLinks: an attempt that outlives its
// lease ends fenced, and the next attempt links to it; a retried attempt
// on another node (a client with a Tracer of its own) links to the
// previous attempt through the trace the job keeps.
func TestTracerFencedAttemptAndPreviousLinks(t *testing.T) {
	sp := newSpans(t)
	store, reg := tracedRuntime(t)
	returned := make(chan struct{})
	twice.MustRegister(reg, twice.HandlerFunc[spanned](func(ctx context.Context, j *twice.Job[spanned]) error {
		switch {
		case j.Args.N == 1 && j.Attempt == 1: // outlives its lease
			<-ctx.Done()
			defer close(returned)
			return ctx.Err()
		case j.Args.N == 2 && j.Epoch == 1:
			return twice.Permanent(errors.New("a human must look"))
		}
		return nil
	}), &twice.KindOpts{Strategy: twice.ClaimAfter})
	c := startTraced(t, store, reg, twiceotel.NewTracer(sp.tp), func(c *twice.Config) { c.LeaseDuration = time.Second })
	res, err := c.Enqueue(context.Background(), spanned{N: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, store, res.Job.ID, twicetype.JobStateRunning)
	if _, err := store.JobRescue(context.Background(), &twicestore.JobRescueParams{Now: time.Now().Add(time.Hour), Limit: 10}); err != nil {
		t.Fatal(err)
	}
	waitfor.Closed(t, returned, "the stale handler to return")
	waitState(t, store, res.Job.ID, twicetype.JobStateCompleted)
	id := fmt.Sprintf("twice.job.id=%d", res.Job.ID)
	waitfor.Cond(t, "two delivery spans", func() bool { return len(sp.where("process ", id)) == 2 }, sp.describe)
	fenced := sp.where("process ", id, "twice.outcome=fenced", "twice.epoch=1")
	second := sp.where("process ", id, "twice.outcome=completed", "twice.epoch=2")
	if len(fenced) != 1 || len(second) != 1 || !linksTo(second[0], fenced[0], "previous") {
		t.Fatalf("want a fenced attempt and a completed one linked to it:\n%s", sp.describe())
	}

	// A retry on another node: the first client stops after attempt 1's
	// failure, and a second client, with a Tracer of its own, runs the
	// job again once it is retried by hand.
	if err := c.Shutdown(context.Background(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	other := startTraced(t, store, reg, twiceotel.NewTracer(sp.tp), nil)
	res, err = other.Enqueue(context.Background(), spanned{N: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, store, res.Job.ID, twicetype.JobStateDead)
	if err := other.Shutdown(context.Background(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := store.JobRetry(context.Background(), &twicestore.JobBulkParams{Filter: twicestore.JobFilter{IDs: []int64{res.Job.ID}}}); err != nil {
		t.Fatal(err)
	}
	startTraced(t, store, reg, twiceotel.NewTracer(sp.tp), nil)
	waitState(t, store, res.Job.ID, twicetype.JobStateCompleted)
	id = fmt.Sprintf("twice.job.id=%d", res.Job.ID)
	waitfor.Cond(t, "the retried job's span", func() bool { return len(sp.where("process ", id, "twice.outcome=completed")) == 1 }, sp.describe)
	dead := sp.where("process ", id, "twice.outcome=dead", "twice.epoch=1")
	retried := sp.where("process ", id, "twice.outcome=completed", "twice.epoch=2")
	if len(dead) != 1 || len(retried) != 1 || !linksTo(retried[0], dead[0], "previous") {
		t.Fatalf("the retried job on another node does not link to its dead attempt:\n%s", sp.describe())
	}
}

type flowTask struct{ Name string }

func (flowTask) Kind() string { return "otel.flow.v1" }

type flowChild struct{ Of string }

func (flowChild) Kind() string { return "otel.flow_child.v1" }

// TestTracerWorkflowAndContinuationEdges: a 3-task workflow (a and b, then
// c) gives c's delivery links to a's and b's; a continuation's enqueue is
// a child of its parent's delivery, with a step's span beside it.
func TestTracerWorkflowAndContinuationEdges(t *testing.T) {
	sp := newSpans(t)
	store, reg := tracedRuntime(t)
	twice.MustRegister(reg, twice.HandlerFunc[flowTask](func(ctx context.Context, j *twice.Job[flowTask]) error {
		if _, err := twice.Step(ctx, "note", twice.ClaimAfter, func(context.Context) (string, error) { return j.Args.Name, nil }); err != nil {
			return err
		}
		if j.Args.Name == "c" {
			return j.Then(flowChild{Of: "c"}, nil)
		}
		return nil
	}), &twice.KindOpts{Strategy: twice.ClaimAfter})
	twice.MustRegister(reg, twice.HandlerFunc[flowChild](func(context.Context, *twice.Job[flowChild]) error { return nil }), nil)
	c := startTraced(t, store, reg, twiceotel.NewTracer(sp.tp), nil)
	wf := twice.NewWorkflow("edges").
		Add("a", flowTask{Name: "a"}, nil).
		Add("b", flowTask{Name: "b"}, nil).
		Add("c", flowTask{Name: "c"}, nil, "a", "b")
	res, err := c.EnqueueWorkflow(context.Background(), wf)
	if err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "the continuation's delivery", func() bool {
		return len(sp.where("process ", "twice.kind=otel.flow_child.v1")) == 1
	}, sp.describe)

	info, err := c.WorkflowGet(context.Background(), res.Workflow.ID)
	if err != nil {
		t.Fatal(err)
	}
	delivery := func(task string) sdktrace.ReadOnlySpan {
		t.Helper()
		got := sp.where("process ", fmt.Sprintf("twice.job.id=%d", info.Task(task).Job.ID))
		if len(got) != 1 {
			t.Fatalf("task %s: %d delivery spans:\n%s", task, len(got), sp.describe())
		}
		return got[0]
	}
	a, b, cSpan := delivery("a"), delivery("b"), delivery("c")
	if !linksTo(cSpan, a, "dependency") || !linksTo(cSpan, b, "dependency") {
		t.Errorf("task c does not link to a and b:\n%s", sp.describe())
	}
	if linksTo(a, b, "dependency") || linksTo(b, a, "dependency") {
		t.Errorf("roots a and b link to each other:\n%s", sp.describe())
	}
	wfSend := sp.where("send ", "messaging.operation.name=workflow", "messaging.batch.message_count=3")
	if len(wfSend) != 1 || !linksTo(a, wfSend[0], "producer") || !linksTo(cSpan, wfSend[0], "producer") {
		t.Errorf("the tasks do not link to the workflow's enqueue:\n%s", sp.describe())
	}
	steps := sp.where("step note", "twice.step.status=ran")
	if len(steps) != 3 {
		t.Errorf("%d step spans that ran, want 3:\n%s", len(steps), sp.describe())
	}
	cont := sp.where("send", "messaging.operation.name=continuation")
	child := sp.where("process ", "twice.kind=otel.flow_child.v1")
	if len(cont) != 1 || cont[0].Parent().SpanID() != cSpan.SpanContext().SpanID() || !linksTo(child[0], cont[0], "producer") {
		t.Errorf("the continuation's enqueue is not c's child, or its delivery not linked to it:\n%s", sp.describe())
	}
}

// TestTracerStepReceipt: a redelivered handler's step returns the first
// delivery's receipt, and its span says so.
func TestTracerStepReceipt(t *testing.T) {
	sp := newSpans(t)
	store, reg := tracedRuntime(t)
	twice.MustRegister(reg, twice.HandlerFunc[spanned](func(ctx context.Context, _ *twice.Job[spanned]) error {
		_, err := twice.Step(ctx, "charge", twice.ClaimBefore, func(context.Context) (int, error) { return 42, nil })
		return err
	}), &twice.KindOpts{Strategy: twice.None})
	c := startTraced(t, store, reg, twiceotel.NewTracer(sp.tp), func(c *twice.Config) { c.Redeliver = true })
	res, err := c.Enqueue(context.Background(), spanned{N: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, store, res.Job.ID, twicetype.JobStateCompleted)
	// Two deliveries at once may meet the step's claim in progress: the
	// twin fails and the job is retried, then both deliveries get the
	// receipt. A step span ends before its delivery's span does, so wait
	// for those too: the check below reads the parents among ended spans.
	waitfor.Cond(t, "a step span with a receipt, and every step span's delivery ended", func() bool {
		receipts := sp.where("step charge", "twice.step.status=receipt")
		if len(receipts) == 0 {
			return false
		}
		for _, s := range append(sp.where("step charge"), receipts...) {
			if sp.parentName(s) == "" {
				return false
			}
		}
		return true
	}, sp.describe)
	ran, receipt := sp.where("step charge", "twice.step.status=ran"), sp.where("step charge", "twice.step.status=receipt")
	if len(ran) != 1 {
		t.Fatalf("%d step spans ran, want 1:\n%s", len(ran), sp.describe())
	}
	for _, s := range append(ran, receipt...) {
		if !strings.HasPrefix(sp.parentName(s), "process ") {
			t.Errorf("step span's parent is %q, want a delivery", sp.parentName(s))
		}
	}
}

// parentName is the name of s's parent span, if it ended.
func (s *spans) parentName(child sdktrace.ReadOnlySpan) string {
	for _, sp := range s.rec.Ended() {
		if sp.SpanContext().SpanID() == child.Parent().SpanID() {
			return sp.Name()
		}
	}
	return ""
}

// TestTracerFencedThenHit is the README's trace: an attempt whose effect
// happened after its lease was lost ends fenced (its ClaimAfter marker is
// claimed all the same), and the next attempt finds the marker: hit, a
// no-op, linked to the fenced attempt. Run with -v to print the trace.
func TestTracerFencedThenHit(t *testing.T) {
	sp := newSpans(t)
	store, reg := tracedRuntime(t)
	tracer := twiceotel.NewTracer(sp.tp)
	started, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	twice.MustRegister(reg, twice.HandlerFunc[spanned](func(context.Context, *twice.Job[spanned]) error {
		if calls.Add(1) == 1 {
			close(started)
			<-release // the effect takes longer than the lease
		}
		return nil
	}), &twice.KindOpts{Strategy: twice.ClaimAfter})
	first := startTraced(t, store, reg, tracer, func(c *twice.Config) { c.LeaseDuration = time.Second })
	res, err := first.Enqueue(context.Background(), spanned{N: 7}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitfor.Closed(t, started, "attempt 1 to start")
	// The queue is paused first, so this worker cannot fetch the rescued
	// job again while attempt 1 still runs.
	ctx := context.Background()
	if err := first.QueuePause(ctx, &twice.QueuePauseParams{Queue: twice.QueueDefault, By: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.JobRescue(ctx, &twicestore.JobRescueParams{Now: time.Now().Add(time.Hour), Limit: 10}); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- first.Shutdown(ctx, 10*time.Second) }()
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if _, err := first.QueueResume(ctx, &twice.QueueResumeParams{Queue: twice.QueueDefault, By: "test"}); err != nil {
		t.Fatal(err)
	}
	startTraced(t, store, reg, tracer, nil) // the next worker in this process
	waitState(t, store, res.Job.ID, twicetype.JobStateCompleted)
	waitfor.Cond(t, "two delivery spans", func() bool { return len(sp.where("process ")) == 2 }, sp.describe)

	fenced := sp.where("process ", "twice.marker=claimed", "twice.outcome=fenced", "twice.epoch=1")
	hit := sp.where("process ", "twice.marker=hit", "twice.outcome=noop", "twice.epoch=2")
	if len(fenced) != 1 || len(hit) != 1 || !linksTo(hit[0], fenced[0], "previous") {
		t.Fatalf("want a fenced attempt that claimed, then a hit linked to it:\n%s", sp.describe())
	}
	if calls.Load() != 1 {
		t.Errorf("the effect ran %d times, want once", calls.Load())
	}
	t.Logf("trace:\n%s", sp.describe())
}
