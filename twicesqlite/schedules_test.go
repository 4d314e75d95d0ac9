package twicesqlite

import (
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// TestScheduleTickTwoStores has two Stores on one file, as two processes
// would have, record the same tick at once. Each Store's write gate only
// orders its own writers; between the Stores, SQLite's write lock, taken
// when each tick's transaction begins, makes exactly one of them fire.
func TestScheduleTickTwoStores(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "twice.db")
	var stores [2]*Store
	for i := range stores {
		s, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores[i] = s
	}
	at := time.Date(2031, 3, 4, 5, 6, 0, 0, time.UTC)
	const ticks = 8
	fired := make([]bool, ticks)
	errs := make([]error, ticks)
	var wg sync.WaitGroup
	for i := range ticks {
		wg.Go(func() {
			res, err := stores[i%2].ScheduleTick(ctx, &twicestore.ScheduleTickParams{
				Name: "nightly", Kind: "test.tick.v1", Spec: "@every 1m", TickAt: at, NextAt: at.Add(time.Minute),
				Outcome: twicetype.ScheduleEnqueued, Now: at,
				Job: &twicestore.JobInsertParams{Kind: "test.tick.v1", Queue: "default", MaxAttempts: 3},
			})
			if err == nil {
				fired[i] = res.Fired
			}
			errs[i] = err
		})
	}
	wg.Wait()
	n := 0
	for i := range ticks {
		if errs[i] != nil {
			t.Fatalf("tick %d: %v", i, errs[i])
		}
		if fired[i] {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d ticks fired, want 1", n)
	}
	list, err := stores[0].JobList(ctx, &twicestore.JobListParams{Filter: twicestore.JobFilter{Kind: "test.tick.v1"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Jobs) != 1 {
		t.Fatalf("%d jobs, want 1", len(list.Jobs))
	}
}
