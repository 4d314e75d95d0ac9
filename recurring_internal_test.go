package twice

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
)

// neverSchedule has no next activation, as the cron library answers for a
// spec with none in the next five years.
type neverSchedule struct{}

func (neverSchedule) Next(time.Time) time.Time { return time.Time{} }

type neverArgs struct{}

func (neverArgs) Kind() string { return "test.never.v1" }

// noNextTickHandler counts the scheduler's "no next tick" errors and
// signals the first.
type noNextTickHandler struct {
	slog.Handler
	count atomic.Int64
	first chan struct{}
}

func (h *noNextTickHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "has no next tick") && h.count.Add(1) == 1 {
		close(h.first)
	}
	return nil
}

func (h *noNextTickHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *noNextTickHandler) WithAttrs([]slog.Attr) slog.Handler { return h }

// TestSchedulerDropsScheduleWithoutNextTick: a schedule whose next tick is
// the zero time (Schedule refuses such specs; this one is registered behind
// its back) is dropped once, not fired at the zero time in a loop: before,
// the loop fired it over and over (30k–97k warnings in 3 s).
func TestSchedulerDropsScheduleWithoutNextTick(t *testing.T) {
	t.Parallel()
	store, err := twicesqlite.Open(t.Context(), filepath.Join(t.TempDir(), "twice.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	reg := NewRegistry()
	MustRegister(reg, HandlerFunc[neverArgs](func(context.Context, *Job[neverArgs]) error { return nil }), nil)
	reg.schedules = map[string]*schedule{"never": {
		name: "never", spec: "0 0 30 2 *", kind: neverArgs{}.Kind(), args: []byte("{}"), parsed: neverSchedule{},
	}}
	logs := &noNextTickHandler{Handler: slog.DiscardHandler, first: make(chan struct{})}
	c, err := NewClient(store, Config{Registry: reg, PollInterval: 20 * time.Millisecond, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-logs.first:
	case <-time.After(10 * time.Second):
		t.Fatal("the scheduler never reported the schedule without a next tick")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n := logs.count.Load(); n != 1 {
		t.Errorf("reported %d times, want once", n)
	}
	res, err := store.ScheduleList(ctx, &twicestore.ScheduleListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Schedules) != 0 {
		t.Errorf("ticks recorded: %+v, want none", res.Schedules)
	}
}
