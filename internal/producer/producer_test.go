package producer

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/twicejobs/twice/internal/testkit/waitfor"
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
	store := storeWithJobs(t, jobs)
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
		Run: func(f Fetched) {
			row := f.Row
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
	waitfor.RecvWithin(t, time.Minute, finished, fmt.Sprintf("all %d jobs to run", jobs))
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
	run := func(Fetched) {
		var v struct{ Run, N, At int64 }
		if err := json.Unmarshal(payload, &v); err != nil {
			panic(err)
		}
	}
	const slots = 100
	row := Fetched{Row: &twicetype.JobRow{Queue: "q"}}
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
				run(row)
			})
		}
		wg.Wait()
	})
}

// growStack uses about n × 256 bytes of stack, as a handler decoding its
// arguments does.
//
//go:noinline
func growStack(n int) byte {
	var buf [256]byte
	buf[n%len(buf)] = byte(n)
	if n == 0 {
		return buf[0]
	}
	return growStack(n-1) + buf[(n+1)%len(buf)]
}

// BenchmarkIdleWorkerStacks: bursts of 100 jobs whose run function needs
// ~6 KB of stack, with a garbage collection while the workers wait for the
// next burst, as in a burn-down, where collections come while the workers
// wait for the next fetch. One op is one burst. An idle worker that waits
// at the top of its stack has it halved by each collection and grown
// (copied) again by its next job; one that waits in a frame of
// idleStackPad bytes keeps it.
func BenchmarkIdleWorkerStacks(b *testing.B) {
	const slots = 100
	var wg sync.WaitGroup
	p := New(Config{Queues: []Queue{{Name: "q", Concurrency: slots}}, MaxWorkers: slots, Run: func(Fetched) {
		defer wg.Done()
		growStack(24)
	}})
	row := Fetched{Row: &twicetype.JobRow{Queue: "q"}}
	for b.Loop() {
		wg.Add(slots)
		for range slots {
			p.dispatch(row)
		}
		wg.Wait()
		runtime.GC()
	}
	close(p.done)
	p.Wait()
}

// dropPeeks is a store wrapper that hands back the fetched jobs without
// the fetch's answers, as a wrapper written before fetch peeks would.
type dropPeeks struct{ twicestore.Executor }

func (d dropPeeks) JobFetch(ctx context.Context, p *twicestore.JobFetchParams) (*twicestore.JobFetchResult, error) {
	res, err := d.Executor.JobFetch(ctx, p)
	if err != nil {
		return nil, err
	}
	return &twicestore.JobFetchResult{Jobs: res.Jobs}, nil
}

// TestPassesTheFetchPeeks: the producer asks its fetches to peek the kinds
// Config.Peek names and hands each job its answer; a job whose answer did
// not come back (a wrapper dropped it) or whose kind was not peeked goes
// as NotPeeked, never as NotProcessed.
func TestPassesTheFetchPeeks(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(twicestore.Executor) twicestore.Executor
		want map[string]Peek
	}{
		{"answered", func(e twicestore.Executor) twicestore.Executor { return e },
			map[string]Peek{"done": Processed, "new": NotProcessed, "other": NotPeeked}},
		{"answers dropped", func(e twicestore.Executor) twicestore.Executor { return dropPeeks{e} },
			map[string]Peek{"done": NotPeeked, "new": NotPeeked, "other": NotPeeked}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fetchPeeks(t, tc.wrap)
			for key, want := range tc.want {
				if got[key] != want {
					t.Errorf("job %q: peek %d, want %d (all: %v)", key, got[key], want, got)
				}
			}
		})
	}
}

// fetchPeeks runs a producer over three jobs, two of the peeked kind (one
// whose marker is claimed) and one of another kind, and returns the peek
// each was handed, by key.
func fetchPeeks(t *testing.T, wrap func(twicestore.Executor) twicestore.Executor) map[string]Peek {
	ctx := context.Background()
	store, err := twicesqlite.Open(ctx, filepath.Join(t.TempDir(), "p.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	var params []*twicestore.JobInsertParams
	for _, key := range []string{"done", "new"} {
		params = append(params, &twicestore.JobInsertParams{Kind: "k.v1", Queue: "q", Args: []byte(`{}`), Key: key, MaxAttempts: 1})
	}
	params = append(params, &twicestore.JobInsertParams{Kind: "other.v1", Queue: "q", Args: []byte(`{}`), Key: "other", MaxAttempts: 1})
	if _, err := store.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: params}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.MarkerClaim(ctx, &twicestore.MarkerParams{Handler: "h", Key: "done"}); err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		got = map[string]Peek{}
		all = make(chan struct{})
	)
	p := New(Config{
		Exec: wrap(store), Queues: []Queue{{Name: "q", Concurrency: 3}}, MaxWorkers: 3,
		Kinds: func() []string { return []string{"k.v1", "other.v1"} }, Node: "n", Lease: time.Minute,
		PollInterval: 10 * time.Millisecond, FetchLimit: 10, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Peek: map[string]string{"k.v1": "h"},
		Run: func(f Fetched) {
			mu.Lock()
			defer mu.Unlock()
			got[f.Row.Key] = f.Peek
			if len(got) == 3 {
				close(all)
			}
		},
	})
	runCtx, cancel := context.WithCancel(ctx)
	go p.Run(runCtx)
	waitfor.Closed(t, all, "the jobs to be all dispatched")
	cancel()
	p.Wait()
	mu.Lock()
	defer mu.Unlock()
	return maps.Clone(got)
}

// TestQueueOrder: with one slot and two queues full of jobs, strict order
// works the first queue empty before the second, and round robin
// alternates, starting each round with the next queue. The test runs the
// rounds itself, one job each, holding the job until its round is over and
// freeing the slot between rounds, so nothing but the order decides what
// is fetched.
func TestQueueOrder(t *testing.T) {
	for _, tc := range []struct {
		name       string
		roundRobin bool
		want       string
	}{
		{"strict", false, "aaabbb"},
		{"round robin", true, "ababab"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			store, err := twicesqlite.Open(ctx, filepath.Join(t.TempDir(), "p.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = store.Close() }()
			var params []*twicestore.JobInsertParams
			for _, q := range []string{"a", "b"} {
				for range 3 {
					params = append(params, &twicestore.JobInsertParams{Kind: "k.v1", Queue: q, Args: []byte(`{}`), MaxAttempts: 1})
				}
			}
			if _, err := store.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: params}); err != nil {
				t.Fatal(err)
			}
			started := make(chan string, 1)
			release := make(chan struct{})
			p := New(Config{
				Exec: store, Queues: []Queue{{Name: "a", Concurrency: 1}, {Name: "b", Concurrency: 1}}, MaxWorkers: 1,
				RoundRobin: tc.roundRobin,
				Kinds:      func() []string { return []string{"k.v1"} }, Node: "n", Lease: time.Minute,
				FetchLimit: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Run: func(f Fetched) {
					started <- f.Row.Queue
					<-release // held until the round is over, so the slot stays taken
				},
			})
			var order string
			for range len(params) {
				if _, _, err := p.fetchRound(ctx); err != nil {
					t.Fatal(err)
				}
				order += waitfor.Recv(t, started, "the round's job to start")
				release <- struct{}{}
				waitfor.Recv(t, p.freed, "the round's job to free its slot")
			}
			close(p.done) // no Run loop: no more dispatches
			p.Wait()
			if order != tc.want {
				t.Errorf("queues in run order %q, want %q", order, tc.want)
			}
		})
	}
}

// gatedFetch holds every JobFetch until release is closed, reporting each
// call's params on calls, and counts the fetches in flight at once.
type gatedFetch struct {
	twicestore.Executor
	calls             chan *twicestore.JobFetchParams
	release           chan struct{}
	inFlight, maxSeen atomic.Int64
}

func (g *gatedFetch) JobFetch(ctx context.Context, p *twicestore.JobFetchParams) (*twicestore.JobFetchResult, error) {
	n := g.inFlight.Add(1)
	defer g.inFlight.Add(-1)
	for {
		m := g.maxSeen.Load()
		if n <= m || g.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	g.calls <- p
	<-g.release
	return g.Executor.JobFetch(ctx, p)
}

// TestNotifyFetchesWhileARoundIsInFlight: a notification that comes while
// the main loop's fetch is in flight starts a second fetch at once, which
// asks only for the slots the first did not reserve; no more than two
// fetches are ever in flight, and every job runs once within the slots.
// Without the reservation the second fetch would ask for FetchLimit jobs
// again; without the extra round it would not come until the first ended.
func TestNotifyFetchesWhileARoundIsInFlight(t *testing.T) {
	const jobs, slots, fetchLimit = 10, 4, 3
	ctx := context.Background()
	store := storeWithJobs(t, jobs)
	gate := &gatedFetch{Executor: store, calls: make(chan *twicestore.JobFetchParams, 100), release: make(chan struct{})}
	var (
		mu            sync.Mutex
		seen          = map[int64]int{}
		running, most atomic.Int64
		finished      = make(chan struct{})
	)
	p := New(Config{
		Exec: gate, Queues: []Queue{{Name: "q", Concurrency: slots}}, MaxWorkers: slots,
		Kinds: func() []string { return []string{"k.v1"} }, Node: "n", Lease: time.Minute,
		PollInterval: time.Hour, FetchLimit: fetchLimit, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Run: func(f Fetched) {
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
			seen[f.Row.ID]++
			if len(seen) == jobs && seen[f.Row.ID] == 1 {
				close(finished)
			}
		},
	})
	runCtx, cancel := context.WithCancel(ctx)
	go p.Run(runCtx)
	if first := waitfor.Recv(t, gate.calls, "the main loop's first fetch"); first.Limit != fetchLimit {
		t.Errorf("first fetch asked for %d jobs, want %d", first.Limit, fetchLimit)
	}
	p.Notify()
	if second := waitfor.Recv(t, gate.calls, "a fetch started by the notification while the first is in flight"); second.Limit != slots-fetchLimit {
		t.Errorf("second fetch asked for %d jobs, want the %d slots the first did not reserve", second.Limit, slots-fetchLimit)
	}
	p.Notify() // both rounds in flight: this one waits for the main loop
	close(gate.release)
	// The rounds that follow, woken as slots free, pass the gate too.
	go func() {
		for {
			select {
			case <-finished:
				return
			case <-gate.calls:
			}
		}
	}()
	waitfor.RecvWithin(t, time.Minute, finished, fmt.Sprintf("all %d jobs to run", jobs))
	cancel()
	p.Wait()
	if m := most.Load(); m > slots {
		t.Errorf("%d jobs ran at once, want at most %d", m, slots)
	}
	if m := gate.maxSeen.Load(); m > int64(maxRounds) {
		t.Errorf("%d fetches were in flight at once, want at most %d", m, maxRounds)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("job %d ran %d times, want once", id, n)
		}
	}
}

// slowFetch makes every JobFetch take delay more, as a fetch does on a
// busy server (a write that commits: tens of milliseconds under load).
type slowFetch struct {
	twicestore.Executor
	delay time.Duration
}

func (s slowFetch) JobFetch(ctx context.Context, p *twicestore.JobFetchParams) (*twicestore.JobFetchResult, error) {
	t := time.NewTimer(s.delay) // the simulated server's time, not a synchronisation
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Executor.JobFetch(ctx, p)
}

// BenchmarkNotifyToStart: jobs inserted one at a time every 2 ms, each
// followed by Notify, on a store whose fetch takes 10 ms more; it reports
// the time from Notify to the job's start, with one fetch round at a time
// (before) against a second round started by a notification that comes
// while the first is in flight. With one round a job waits for the round
// in flight and then for its own, 1.5 fetches on average; with two, about
// one.
func BenchmarkNotifyToStart(b *testing.B) {
	for _, rounds := range []int{1, 2} {
		b.Run(fmt.Sprintf("rounds=%d", rounds), func(b *testing.B) {
			defer func(old int) { maxRounds = old }(maxRounds)
			maxRounds = rounds
			ctx := context.Background()
			store, err := twicesqlite.Open(ctx, filepath.Join(b.TempDir(), "p.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = store.Close() }()
			var (
				mu       sync.Mutex
				notified = map[int64]time.Time{}
				waits    []time.Duration
				all      = make(chan struct{})
			)
			n := max(b.N, 200)
			p := New(Config{
				Exec: slowFetch{store, 10 * time.Millisecond}, Queues: []Queue{{Name: "q", Concurrency: 100}}, MaxWorkers: 100,
				Kinds: func() []string { return []string{"k.v1"} }, Node: "n", Lease: time.Minute,
				PollInterval: time.Hour, FetchLimit: 100, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Run: func(f Fetched) {
					mu.Lock()
					defer mu.Unlock()
					waits = append(waits, time.Since(notified[f.Row.ID]))
					if len(waits) == n {
						close(all)
					}
				},
			})
			runCtx, cancel := context.WithCancel(ctx)
			defer func() { cancel(); p.Wait() }()
			go p.Run(runCtx)
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			b.ResetTimer()
			for range n {
				<-tick.C
				// Locked across the insert, so the job's start waits for
				// its notification time to be recorded.
				mu.Lock()
				res, err := store.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{
					{Kind: "k.v1", Queue: "q", Args: []byte(`{}`), MaxAttempts: 1},
				}})
				if err != nil {
					mu.Unlock()
					b.Fatal(err)
				}
				notified[res.Jobs[0].Job.ID] = time.Now()
				mu.Unlock()
				p.Notify()
			}
			<-all
			b.StopTimer()
			slices.Sort(waits)
			b.ReportMetric(float64(waits[len(waits)/2])/float64(time.Millisecond), "p50-ms")
			b.ReportMetric(float64(waits[len(waits)*99/100])/float64(time.Millisecond), "p99-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// recordedFetch reports each JobFetch's Limit on limits.
type recordedFetch struct {
	twicestore.Executor
	limits chan int
}

func (r *recordedFetch) JobFetch(ctx context.Context, p *twicestore.JobFetchParams) (*twicestore.JobFetchResult, error) {
	r.limits <- p.Limit
	return r.Executor.JobFetch(ctx, p)
}

// TestFreedSlotsGatherBeforeFetching: after a full fetch, the fetch loop
// does not fetch at the first freed slot but once half a fetch's worth is
// free, or when fetchCooldown ends the wait.
func TestFreedSlotsGatherBeforeFetching(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cooldown  time.Duration
		freed     int // slots freed before the second fetch
		wantLimit int
	}{
		{"half a fetch", time.Hour, 5, 5},
		{"cooldown", time.Millisecond, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const slots = 10
			defer func(d time.Duration) { fetchCooldown = d }(fetchCooldown)
			fetchCooldown = tc.cooldown
			ctx := context.Background()
			store := storeWithJobs(t, 2*slots)
			rec := &recordedFetch{Executor: store, limits: make(chan int, 100)}
			release := make(chan struct{})
			started := make(chan struct{}, 2*slots)
			p := New(Config{
				Exec: rec, Queues: []Queue{{Name: "q", Concurrency: slots}}, MaxWorkers: slots,
				Kinds: func() []string { return []string{"k.v1"} }, Node: "n", Lease: time.Minute,
				PollInterval: time.Hour, FetchLimit: slots, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Run: func(Fetched) {
					started <- struct{}{}
					<-release
				},
			})
			held := make(chan int, 2*slots)
			p.holding = func(free, _ int) { held <- free }
			runCtx, cancel := context.WithCancel(ctx)
			go p.Run(runCtx)
			if got := waitfor.Recv(t, rec.limits, "the first fetch"); got != slots {
				t.Fatalf("first fetch asked for %d jobs, want %d", got, slots)
			}
			for range slots {
				waitfor.Recv(t, started, "the first fetch's jobs to start")
			}
			release <- struct{}{}
			// The loop saw the freed slot and held the fetch back; a fetch
			// at the first freed slot would have asked for 1 instead.
			if free := waitfor.Recv(t, held, "the loop to hold the fetch for more free slots"); free != 1 {
				t.Fatalf("the loop held with %d slots free, want 1", free)
			}
			for range tc.freed - 1 {
				release <- struct{}{}
			}
			if got := waitfor.Recv(t, rec.limits, "the second fetch"); got != tc.wantLimit {
				t.Errorf("second fetch asked for %d jobs, want %d", got, tc.wantLimit)
			}
			cancel()
			close(release)
			p.Wait()
		})
	}
}

// storeWithJobs opens a SQLite store, closed when the test ends, holding n
// available jobs of kind k.v1 in queue q.
func storeWithJobs(t *testing.T, n int) *twicesqlite.Store {
	t.Helper()
	store, err := twicesqlite.Open(t.Context(), filepath.Join(t.TempDir(), "p.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	params := make([]*twicestore.JobInsertParams, n)
	for i := range params {
		params[i] = &twicestore.JobInsertParams{Kind: "k.v1", Queue: "q", Args: []byte(`{}`), MaxAttempts: 1}
	}
	if _, err := store.JobInsertMany(t.Context(), &twicestore.JobInsertManyParams{Jobs: params}); err != nil {
		t.Fatal(err)
	}
	return store
}
