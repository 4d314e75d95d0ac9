package twiceotel_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twiceotel"
	"github.com/twicejobs/twice/twicesqlite"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type traced struct{ N int }

func (traced) Kind() string { return "otel.traced.v1" }

// TestTraceContextReachesTheHandler enqueues one job inside a span and one
// outside any, on a real runtime, and checks what each handler's context
// carries.
func TestTraceContextReachesTheHandler(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store, err := twicesqlite.Open(ctx, filepath.Join(t.TempDir(), "twice.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	seen := make(chan trace.SpanContext, 2)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[traced](func(ctx context.Context, _ *twice.Job[traced]) error {
		seen <- trace.SpanContextFromContext(ctx)
		return nil
	}), nil)
	client, err := twice.NewClient(store, twice.Config{
		Registry: reg, PollInterval: 20 * time.Millisecond,
		EnqueueMetadata: twiceotel.Inject,
		Middleware:      []twice.Middleware{twiceotel.Middleware},
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		client.Stop(sctx)
	}()

	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c},
		SpanID:     trace.SpanID{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31},
		TraceFlags: trace.FlagsSampled,
	})
	res, err := client.Enqueue(trace.ContextWithSpanContext(ctx, parent), traced{N: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Job.Metadata["traceparent"]; got != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
		t.Errorf("stored traceparent = %q", got)
	}
	got := waitfor.Recv(t, seen, "the handler to run")
	if got.TraceID() != parent.TraceID() || got.SpanID() != parent.SpanID() || !got.IsSampled() || !got.IsRemote() {
		t.Errorf("handler's span context = %+v, want the enqueuer's %+v as a remote parent", got, parent)
	}

	res, err = client.Enqueue(ctx, traced{N: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Job.Metadata) != 0 {
		t.Errorf("a job enqueued outside any span has metadata %v", res.Job.Metadata)
	}
	if got := waitfor.Recv(t, seen, "the handler to run"); got.IsValid() {
		t.Errorf("a job enqueued outside any span runs with span context %+v", got)
	}
}
