package twice_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicetype"
)

// opTracer records the enqueues a Tracer is told about, and gives each
// delivery the trace it was built with.
type opTracer struct {
	trace string
	mu    sync.Mutex
	ops   []string
}

func (r *opTracer) StartEnqueue(ctx context.Context, op string, n int) (context.Context, func([]*twicetype.JobRow, error)) {
	return ctx, func(jobs []*twicetype.JobRow, err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.ops = append(r.ops, fmt.Sprintf("%s n=%d stored=%d err=%v", op, n, len(jobs), err != nil))
	}
}

func (r *opTracer) StartDelivery(ctx context.Context, _ *twicetype.JobRow, _ twice.Strategy, _ context.Context) (context.Context, twice.DeliverySpan) {
	return ctx, twice.DeliverySpan{Trace: r.trace, End: func(twice.DeliveryEnd) {}}
}

func (r *opTracer) StartStep(ctx context.Context, _ string, _ twice.Strategy) (context.Context, func(string, error)) {
	return ctx, func(string, error) {}
}

func (r *opTracer) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

// TestTracerSeesEveryEnqueue: each entry point opens one enqueue span
// with its job count and ends it with the stored jobs or the error.
func TestTracerSeesEveryEnqueue(t *testing.T) {
	store := newStore(t)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[pingArgs](func(_ context.Context, j *twice.Job[pingArgs]) error {
		if j.Args.N == 7 {
			return j.Then(pingArgs{N: 8}, nil)
		}
		return nil
	}), nil)
	tracer := &opTracer{}
	cfg := testConfig(reg)
	cfg.Tracer = tracer
	c, err := twice.NewClient(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Enqueue(ctx, pingArgs{N: 1}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueMany(ctx, []twice.EnqueueParams{{Args: pingArgs{N: 2}}, {Args: pingArgs{N: 3}}, {Args: pingArgs{N: 4}}}); err != nil {
		t.Fatal(err)
	}
	tx, err := store.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueTx(ctx, tx.Unwrap(), pingArgs{N: 5}, nil); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, pingArgs{N: 6}, &twice.EnqueueOpts{Queue: "no spaces allowed"}); err == nil {
		t.Fatal("a bad queue name was accepted")
	}
	if _, err := c.EnqueueWorkflow(ctx, twice.NewWorkflow("w").Add("a", pingArgs{N: 9}, nil).Add("b", pingArgs{N: 10}, nil, "a")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueBatch(ctx, twice.NewBatch(pingArgs{N: 11}, nil).Add(pingArgs{N: 12}, nil)); err != nil {
		t.Fatal(err)
	}
	parent, err := c.Enqueue(ctx, pingArgs{N: 7}, nil)
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, c)
	waitJob(t, store, parent.Job.ID, "completed", isState(twicetype.JobStateCompleted))
	want := []string{
		"enqueue n=1 stored=1 err=false",
		"enqueue n=3 stored=3 err=false",
		"enqueue n=1 stored=1 err=false", // EnqueueTx
		"enqueue n=1 stored=0 err=true",
		"workflow n=2 stored=1 err=false", // the root; b is stored when a completes
		"batch n=2 stored=1 err=false",    // the batch's job; the callback waits
		"enqueue n=1 stored=1 err=false",
		"continuation n=1 stored=0 err=false", // stored with its parent's completion
	}
	if got := tracer.got(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("enqueue spans:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// startWorker starts c and stops it when the test ends.
func startWorker(t *testing.T, c *twice.Client) {
	t.Helper()
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Shutdown(context.Background(), 0) })
}

// TestTracerTraceIsStoredWhenStorable: a delivery's trace is stored with
// its outcome, so the next attempt links to it; one too long, or with a
// NUL byte or invalid UTF-8, is dropped rather than failing the write.
func TestTracerTraceIsStoredWhenStorable(t *testing.T) {
	for name, tc := range map[string]struct{ trace, want string }{
		"traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		"too long":    {strings.Repeat("a", 1000), ""},
		"NUL":         {"00-\x00", ""},
		"not UTF-8":   {"00-\xff", ""},
	} {
		t.Run(name, func(t *testing.T) {
			store := newStore(t)
			reg := twice.NewRegistry()
			twice.MustRegister(reg, twice.HandlerFunc[pingArgs](func(context.Context, *twice.Job[pingArgs]) error { return nil }), nil)
			cfg := testConfig(reg)
			cfg.Tracer = &opTracer{trace: tc.trace}
			c := startClient(t, store, cfg)
			res, err := c.Enqueue(context.Background(), pingArgs{N: 1}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if row := waitJob(t, store, res.Job.ID, "completed", isState(twicetype.JobStateCompleted)); row.Trace != tc.want {
				t.Errorf("stored trace %q, want %q", row.Trace, tc.want)
			}
		})
	}
}
