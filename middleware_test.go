package twice_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicetype"
)

// TestMiddleware: middleware wraps the handler call, first entry outermost;
// a marker no-op never reaches it; an error or panic instead of next is the
// handler's failure.
func TestMiddleware(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var trace []string
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		trace = append(trace, s)
	}
	named := func(name string) twice.Middleware {
		return func(ctx context.Context, job *twicetype.JobRow, next func(context.Context) error) error {
			note(name + " in " + job.Key)
			err := next(ctx)
			note(name + " out")
			return err
		}
	}
	refuse := func(ctx context.Context, job *twicetype.JobRow, next func(context.Context) error) error {
		switch job.Key {
		case "refused":
			return twice.Permanent(errors.New("refused by middleware"))
		case "panics":
			panic("middleware panic")
		}
		return next(ctx)
	}
	store := newStore(t)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[emailArgs](func(_ context.Context, job *twice.Job[emailArgs]) error {
		note("handler " + job.Args.Key)
		return nil
	}), &twice.KindOpts{Strategy: twice.ClaimAfter, MaxAttempts: 1})
	cfg := testConfig(reg)
	cfg.Middleware = []twice.Middleware{named("outer"), named("inner"), refuse}
	client := startClient(t, store, cfg)

	enqueue := func(key string) int64 {
		t.Helper()
		res, err := client.Enqueue(context.Background(), emailArgs{UserID: 1, Key: key}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res.Job.ID
	}
	waitJob(t, store, enqueue("k1"), "completed", isState(twicetype.JobStateCompleted))
	dup := waitJob(t, store, enqueue("k1"), "completed", isState(twicetype.JobStateCompleted))
	if dup.Note != "already processed" {
		t.Fatalf("duplicate's note = %q, want already processed", dup.Note)
	}
	want := []string{"outer in k1", "inner in k1", "handler k1", "inner out", "outer out"}
	mu.Lock()
	got := slices.Clone(trace)
	mu.Unlock()
	if !slices.Equal(got, want) {
		t.Fatalf("calls = %q, want %q (the duplicate must not reach middleware)", got, want)
	}

	refused := waitJob(t, store, enqueue("refused"), "dead", isState(twicetype.JobStateDead))
	if !strings.Contains(refused.Errors[0].Error, "refused by middleware") {
		t.Errorf("refused job's error = %q", refused.Errors[0].Error)
	}
	panicked := waitJob(t, store, enqueue("panics"), "dead", isState(twicetype.JobStateDead))
	if e := panicked.Errors[0]; !strings.Contains(e.Error, "middleware panic") || e.Stack == "" {
		t.Errorf("panicking middleware's error = %q, stack %d bytes", e.Error, len(e.Stack))
	}
	for _, key := range []string{"refused", "panics"} {
		if markerProcessed(t, store, emailHandler, key) {
			t.Errorf("job %q failed in middleware but its marker was claimed", key)
		}
	}
}
