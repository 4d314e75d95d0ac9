package producer

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRunsEachJobOnceWithinConcurrency works a backlog on a real store with
// few slots: every job runs once, never more at once than the slots, and
// Wait leaves no goroutine behind (goleak), idle workers included.
func TestRunsEachJobOnceWithinConcurrency(t *testing.T) {
	const jobs, slots = 300, 4
	ctx := context.Background()
	store, err := twicesqlite.Open(ctx, filepath.Join(t.TempDir(), "p.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	params := make([]*twicestore.JobInsertParams, jobs)
	for i := range params {
		params[i] = &twicestore.JobInsertParams{Kind: "k.v1", Queue: "q", Args: []byte(`{}`), MaxAttempts: 1}
	}
	if _, err := store.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: params}); err != nil {
		t.Fatal(err)
	}
	var (
		mu              sync.Mutex
		seen            = map[int64]int{}
		running, most   atomic.Int64
		finished        = make(chan struct{})
		finishedAlready bool
	)
	p := New(Config{
		Exec: store, Queues: []Queue{{Name: "q", Concurrency: slots}}, MaxWorkers: slots,
		Kinds: func() []string { return []string{"k.v1"} }, Node: "n", Lease: time.Minute,
		PollInterval: 10 * time.Millisecond, FetchLimit: 3, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Run: func(row *twicetype.JobRow, _ bool) {
			n := running.Add(1)
			defer running.Add(-1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			mu.Lock()
			defer mu.Unlock()
			seen[row.ID]++
			if len(seen) == jobs && !finishedAlready {
				finishedAlready = true
				close(finished)
			}
		},
	})
	runCtx, cancel := context.WithCancel(ctx)
	go p.Run(runCtx)
	select {
	case <-finished:
	case <-time.After(time.Minute):
		t.Fatalf("only %d of %d jobs ran", len(seen), jobs)
	}
	cancel()
	p.Wait()
	if m := most.Load(); m > slots {
		t.Errorf("%d jobs ran at once, want at most %d", m, slots)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("job %d ran %d times, want once", id, n)
		}
	}
	if p.Running() != 0 {
		t.Errorf("Running() = %d after Wait, want 0", p.Running())
	}
}

// BenchmarkDispatch measures handing jobs to their run function, which
// decodes a small JSON payload as a handler does: on reused workers (the
// producer's dispatch) against a new goroutine per job (what dispatch did
// before), whose stack grows again from its smallest size for every job.
func BenchmarkDispatch(b *testing.B) {
	payload := []byte(`{"run":123456789,"n":42,"at":1700000000000000000}`)
	run := func(*twicetype.JobRow, bool) {
		var v struct{ Run, N, At int64 }
		if err := json.Unmarshal(payload, &v); err != nil {
			panic(err)
		}
	}
	const slots = 100
	row := fetched{row: &twicetype.JobRow{Queue: "q"}}
	b.Run("reused-workers", func(b *testing.B) {
		p := New(Config{Queues: []Queue{{Name: "q", Concurrency: slots}}, MaxWorkers: slots, Run: run})
		for b.Loop() {
			for p.free(Queue{Name: "q", Concurrency: slots}) <= 0 {
				<-p.freed
			}
			p.dispatch(row)
		}
		close(p.done)
		p.Wait()
	})
	b.Run("goroutine-per-job", func(b *testing.B) {
		sem := make(chan struct{}, slots)
		var wg sync.WaitGroup
		for b.Loop() {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				run(row.row, false)
			})
		}
		wg.Wait()
	})
}

// TestPassesTheFetchPeeks: the producer asks its fetches to peek the kinds
// Config.Peek names and hands each job its answer.
func TestPassesTheFetchPeeks(t *testing.T) {
	ctx := context.Background()
	store, err := twicesqlite.Open(ctx, filepath.Join(t.TempDir(), "p.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var params []*twicestore.JobInsertParams
	for _, key := range []string{"done", "new"} {
		params = append(params, &twicestore.JobInsertParams{Kind: "k.v1", Queue: "q", Args: []byte(`{}`), Key: key, MaxAttempts: 1})
	}
	if _, err := store.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: params}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.MarkerClaim(ctx, &twicestore.MarkerParams{Handler: "h", Key: "done"}); err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		got = map[string]bool{}
		all = make(chan struct{})
	)
	p := New(Config{
		Exec: store, Queues: []Queue{{Name: "q", Concurrency: 2}}, MaxWorkers: 2,
		Kinds: func() []string { return []string{"k.v1"} }, Node: "n", Lease: time.Minute,
		PollInterval: 10 * time.Millisecond, FetchLimit: 10, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Peek: map[string]string{"k.v1": "h"},
		Run: func(row *twicetype.JobRow, processed bool) {
			mu.Lock()
			defer mu.Unlock()
			got[row.Key] = processed
			if len(got) == 2 {
				close(all)
			}
		},
	})
	runCtx, cancel := context.WithCancel(ctx)
	go p.Run(runCtx)
	<-all
	cancel()
	p.Wait()
	if !got["done"] || got["new"] {
		t.Errorf("peeks %v: want done processed, new not", got)
	}
}
