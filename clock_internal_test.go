package twice

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// TestRescuerReadsTheClientClock: the rescuer judges leases by the
// client's clock, so a test moves time past a lease instead of waiting
// for it to run out: a job leased for a minute is rescued, with its
// expiry recorded, when the clock says an hour has passed, and not before.
func TestRescuerReadsTheClientClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, err := twicesqlite.Open(ctx, filepath.Join(t.TempDir(), "twice.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	c, err := NewClient(store, Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := store.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{{
		Kind: "clock.v1", Queue: "default", Args: []byte(`{}`), MaxAttempts: 3, RunAt: start, CreatedAt: start}}}); err != nil {
		t.Fatal(err)
	}
	fetched, err := store.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "default", Kinds: []string{"clock.v1"}, Limit: 1,
		Node: "n1", Now: start, LeaseUntil: start.Add(time.Minute)})
	if err != nil || len(fetched.Jobs) != 1 {
		t.Fatalf("fetch: %v, %v", fetched, err)
	}
	id := fetched.Jobs[0].ID
	woken := 0
	r := newRescuer(c, func() { woken++ })

	c.clock = func() time.Time { return start.Add(30 * time.Second) }
	r.rescue(ctx)
	if row, _ := store.JobGet(ctx, &twicestore.JobGetParams{ID: id}); row.State != twicetype.JobStateRunning || woken != 0 {
		t.Fatalf("30 s into a 1 min lease: job %s, fetch loop woken %d times; want it still running", row.State, woken)
	}
	c.clock = func() time.Time { return start.Add(time.Hour) }
	r.rescue(ctx)
	row, err := store.JobGet(ctx, &twicestore.JobGetParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if row.State != twicetype.JobStateAvailable || len(row.Errors) != 1 || woken != 1 {
		t.Errorf("an hour later: job %s, errors %v, fetch loop woken %d times; want it rescued once", row.State, row.Errors, woken)
	}
}
