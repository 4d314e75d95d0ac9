package twice_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// syncArgs is the kind of the uniqueness tests: a customer's sync, with a
// note that uniqueness by customer ignores.
type syncArgs struct {
	CustomerID int64  `json:"customer_id"`
	Note       string `json:"note"`
}

func (syncArgs) Kind() string { return "customer.sync.v1" }

// uniqueClient is an unstarted client whose registry gives syncArgs u.
func uniqueClient(t testing.TB, store twicestore.Store, u *twice.UniqueOpts) *twice.Client {
	t.Helper()
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[syncArgs](func(context.Context, *twice.Job[syncArgs]) error { return nil }),
		&twice.KindOpts{Unique: u})
	c, err := twice.NewClient(store, testConfig(reg))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// eachStoreN runs test on SQLite and, when TWICE_TEST_POSTGRES is set, on
// PostgreSQL, with n stores opened separately on one fresh database: n
// nodes, each with its own connections.
func eachStoreN(t *testing.T, n int, test func(t *testing.T, stores []twicestore.Store)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		path := migratedPath(t)
		stores := make([]twicestore.Store, n)
		for i := range stores {
			stores[i] = openStore(t, path)
		}
		test(t, stores)
	})
	t.Run("postgres", func(t *testing.T) {
		if os.Getenv(pgtest.EnvURL) == "" {
			t.Skip(pgtest.EnvURL + " is not set")
		}
		t.Parallel()
		u, _ := pgtest.Schema(t, "unique")
		stores := make([]twicestore.Store, n)
		for i := range stores {
			s, err := twicepg.Open(context.Background(), u)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			stores[i] = s
		}
		test(t, stores)
	})
}

// Eight nodes enqueue the same args at once: the unique index lets one
// insert, and every other gets that job back as a duplicate.
func TestUniqueConcurrentInserters(t *testing.T) {
	const n = 8
	eachStoreN(t, n, func(t *testing.T, stores []twicestore.Store) {
		clients := make([]*twice.Client, n)
		for i, s := range stores {
			clients[i] = uniqueClient(t, s, &twice.UniqueOpts{ByArgs: true})
		}
		start := make(chan struct{})
		results := make([]*twice.EnqueueResult, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[i], errs[i] = c.Enqueue(context.Background(), syncArgs{CustomerID: 7, Note: "x"}, nil)
			}()
		}
		close(start)
		wg.Wait()
		inserted := 0
		for i, r := range results {
			if errs[i] != nil {
				t.Fatalf("inserter %d: %v", i, errs[i])
			}
			if !r.Duplicate {
				inserted++
			}
			if r.Job.ID != results[0].Job.ID {
				t.Fatalf("inserter %d got job %d, inserter 0 job %d", i, r.Job.ID, results[0].Job.ID)
			}
		}
		if inserted != 1 {
			t.Fatalf("%d inserters inserted, want 1", inserted)
		}
		if got := countSyncJobs(t, clients[0]); got != 1 {
			t.Fatalf("%d jobs stored, want 1", got)
		}
	})
}

func countSyncJobs(t testing.TB, c *twice.Client) int {
	t.Helper()
	res, err := c.JobList(context.Background(), &twice.JobListParams{JobFilter: twice.JobFilter{Kind: syncArgs{}.Kind()}, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return len(res.Jobs)
}

// ByPeriod cuts run times into periods from the Unix epoch: two enqueues in
// one period make one job, one across the boundary a second.
func TestUniqueByPeriod(t *testing.T) {
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		c := uniqueClient(t, store, &twice.UniqueOpts{ByArgs: true, ByPeriod: time.Hour})
		hour := time.Now().UTC().Truncate(time.Hour).Add(24 * time.Hour)
		enq := func(at time.Time) *twice.EnqueueResult {
			t.Helper()
			res, err := c.Enqueue(context.Background(), syncArgs{CustomerID: 1}, &twice.EnqueueOpts{RunAt: at})
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		first := enq(hour)
		if first.Duplicate {
			t.Fatal("first enqueue is a duplicate")
		}
		if same := enq(hour.Add(time.Hour - time.Microsecond)); !same.Duplicate || same.Job.ID != first.Job.ID {
			t.Fatalf("enqueue in the same hour: duplicate %v of job %d, want a duplicate of %d", same.Duplicate, same.Job.ID, first.Job.ID)
		}
		next := enq(hour.Add(time.Hour))
		if next.Duplicate {
			t.Fatal("enqueue at the next hour's start is a duplicate, want a new job")
		}
		if before := enq(hour.Add(-time.Microsecond)); before.Duplicate {
			t.Fatal("enqueue just before the hour is a duplicate, want a new job")
		}
	})
}

// ArgsFields narrows ByArgs: jobs that differ only in other fields are
// the same job.
func TestUniqueByArgsFields(t *testing.T) {
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		c := uniqueClient(t, store, &twice.UniqueOpts{ArgsFields: []string{"customer_id"}})
		a := mustEnqueueRes(t, c, syncArgs{CustomerID: 1, Note: "a"}, nil)
		if b := mustEnqueueRes(t, c, syncArgs{CustomerID: 1, Note: "b"}, nil); !b.Duplicate || b.Job.ID != a.Job.ID {
			t.Fatalf("other note: duplicate %v, want a duplicate of job %d", b.Duplicate, a.Job.ID)
		}
		if d := mustEnqueueRes(t, c, syncArgs{CustomerID: 2, Note: "a"}, nil); d.Duplicate {
			t.Fatal("other customer is a duplicate, want a new job")
		}
		// All args: the note counts.
		all := &twice.EnqueueOpts{Unique: &twice.UniqueOpts{ByArgs: true}}
		x := mustEnqueueRes(t, c, syncArgs{CustomerID: 3, Note: "a"}, all)
		if y := mustEnqueueRes(t, c, syncArgs{CustomerID: 3, Note: "b"}, all); y.Duplicate {
			t.Fatal("ByArgs: other note is a duplicate, want a new job")
		}
		if z := mustEnqueueRes(t, c, syncArgs{CustomerID: 3, Note: "a"}, all); !z.Duplicate || z.Job.ID != x.Job.ID {
			t.Fatalf("ByArgs: same args: duplicate %v, want a duplicate of job %d", z.Duplicate, x.Job.ID)
		}
	})
}

// ByQueue lets the same args wait once per queue; without it the queue
// does not count.
func TestUniqueByQueue(t *testing.T) {
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		c := uniqueClient(t, store, &twice.UniqueOpts{ByArgs: true, ByQueue: true})
		args := syncArgs{CustomerID: 1}
		a := mustEnqueueRes(t, c, args, &twice.EnqueueOpts{Queue: "alpha"})
		if b := mustEnqueueRes(t, c, args, &twice.EnqueueOpts{Queue: "beta"}); b.Duplicate {
			t.Fatal("other queue is a duplicate, want a new job")
		}
		if again := mustEnqueueRes(t, c, args, &twice.EnqueueOpts{Queue: "alpha"}); !again.Duplicate || again.Job.ID != a.Job.ID {
			t.Fatalf("same queue: duplicate %v, want a duplicate of job %d", again.Duplicate, a.Job.ID)
		}
		byArgs := &twice.UniqueOpts{ByArgs: true}
		x := mustEnqueueRes(t, c, syncArgs{CustomerID: 2}, &twice.EnqueueOpts{Queue: "alpha", Unique: byArgs})
		if y := mustEnqueueRes(t, c, syncArgs{CustomerID: 2}, &twice.EnqueueOpts{Queue: "beta", Unique: byArgs}); !y.Duplicate || y.Job.ID != x.Job.ID {
			t.Fatalf("without ByQueue: duplicate %v, want a duplicate of job %d", y.Duplicate, x.Job.ID)
		}
	})
}

// Replace moves the new args and run time onto a waiting holder (a
// debounce) and leaves a running one alone.
func TestUniqueReplace(t *testing.T) {
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		c := uniqueClient(t, store, &twice.UniqueOpts{ArgsFields: []string{"customer_id"}, OnConflict: twice.OnConflictReplace})
		later := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		first := mustEnqueueRes(t, c, syncArgs{CustomerID: 1, Note: "first"}, &twice.EnqueueOpts{RunAt: later})
		second := mustEnqueueRes(t, c, syncArgs{CustomerID: 1, Note: "second"}, &twice.EnqueueOpts{RunAt: later.Add(time.Minute)})
		if !second.Duplicate || !second.Replaced || second.Job.ID != first.Job.ID {
			t.Fatalf("replace: duplicate %v replaced %v of job %d, want both of job %d", second.Duplicate, second.Replaced, second.Job.ID, first.Job.ID)
		}
		stored := mustGet(t, c, first.Job.ID)
		if note := noteOf(t, stored); note != "second" || !stored.RunAt.Equal(later.Add(time.Minute)) {
			t.Fatalf("stored job has note %q, run at %s; want %q at %s", note, stored.RunAt, "second", later.Add(time.Minute))
		}
		if n := countSyncJobs(t, c); n != 1 {
			t.Fatalf("%d jobs stored, want 1", n)
		}

		// A running holder is not touched: the enqueue is a duplicate.
		due := mustEnqueueRes(t, c, syncArgs{CustomerID: 2, Note: "running"}, nil)
		leased := leaseOne(t, store, twice.QueueDefault, syncArgs{}.Kind())
		if leased.ID != due.Job.ID {
			t.Fatalf("leased job %d, want %d", leased.ID, due.Job.ID)
		}
		res, err := c.Enqueue(ctx, syncArgs{CustomerID: 2, Note: "late"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Duplicate || res.Replaced || res.Job.ID != due.Job.ID {
			t.Fatalf("running holder: duplicate %v replaced %v of job %d, want a plain duplicate of %d", res.Duplicate, res.Replaced, res.Job.ID, due.Job.ID)
		}
		if note := noteOf(t, mustGet(t, c, due.Job.ID)); note != "running" {
			t.Fatalf("running job's note became %q", note)
		}

		// An explicit unique key is one option too: it replaces as well.
		key := &twice.EnqueueOpts{UniqueKey: "sync-9", RunAt: later}
		k1 := mustEnqueueRes(t, c, syncArgs{CustomerID: 9, Note: "a"}, key)
		k2 := mustEnqueueRes(t, c, syncArgs{CustomerID: 10, Note: "b"}, key)
		if !k2.Replaced || k2.Job.ID != k1.Job.ID || k2.Job.UniqueKey != "sync-9" {
			t.Fatalf("explicit key: replaced %v job %d key %q, want job %d replaced under sync-9", k2.Replaced, k2.Job.ID, k2.Job.UniqueKey, k1.Job.ID)
		}
	})
}

// Eight nodes replace at once: still one job, holding the args of one of
// them, and every enqueue after the first reports it replaced.
func TestUniqueConcurrentReplace(t *testing.T) {
	const n = 8
	eachStoreN(t, n, func(t *testing.T, stores []twicestore.Store) {
		u := &twice.UniqueOpts{ArgsFields: []string{"customer_id"}, OnConflict: twice.OnConflictReplace}
		clients := make([]*twice.Client, n)
		for i, s := range stores {
			clients[i] = uniqueClient(t, s, u)
		}
		later := time.Now().Add(time.Hour)
		start := make(chan struct{})
		results := make([]*twice.EnqueueResult, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[i], errs[i] = c.Enqueue(context.Background(), syncArgs{CustomerID: 5, Note: strconv.Itoa(i)},
					&twice.EnqueueOpts{RunAt: later})
			}()
		}
		close(start)
		wg.Wait()
		inserted, replaced := 0, 0
		notes := map[string]bool{}
		for i, r := range results {
			if errs[i] != nil {
				t.Fatalf("replacer %d: %v", i, errs[i])
			}
			if r.Job.ID != results[0].Job.ID {
				t.Fatalf("replacer %d got job %d, replacer 0 job %d", i, r.Job.ID, results[0].Job.ID)
			}
			notes[strconv.Itoa(i)] = true
			switch {
			case !r.Duplicate:
				inserted++
			case r.Replaced:
				replaced++
			}
		}
		if inserted != 1 || replaced != n-1 {
			t.Fatalf("%d inserted and %d replaced, want 1 and %d", inserted, replaced, n-1)
		}
		if got := countSyncJobs(t, clients[0]); got != 1 {
			t.Fatalf("%d jobs stored, want 1", got)
		}
		if note := noteOf(t, mustGet(t, clients[0], results[0].Job.ID)); !notes[note] {
			t.Fatalf("stored note %q is no replacer's", note)
		}
	})
}

// Replacers race a worker that leases and completes the holder: every
// enqueue ends inserted, replacing a waiting holder, or a plain duplicate
// of a running one, never an error; and at most one job waits and one runs.
func TestUniqueReplaceRacesWorker(t *testing.T) {
	eachStoreN(t, 3, func(t *testing.T, stores []twicestore.Store) {
		ctx := context.Background()
		u := &twice.UniqueOpts{ArgsFields: []string{"customer_id"}, OnConflict: twice.OnConflictReplace}
		kind := syncArgs{}.Kind()
		done := make(chan struct{})
		workerErr := make(chan error, 1)
		go func() {
			worker := stores[2]
			for {
				select {
				case <-done:
					workerErr <- nil
					return
				default:
				}
				now := time.Now()
				res, err := worker.JobFetch(ctx, &twicestore.JobFetchParams{Queue: twice.QueueDefault, Kinds: []string{kind},
					Limit: 1, Node: "worker", Now: now, LeaseUntil: now.Add(time.Hour)})
				if err != nil {
					workerErr <- err
					return
				}
				for _, j := range res.Jobs {
					if _, err := worker.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{
						ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted, FinishedAt: time.Now()}}}); err != nil {
						workerErr <- err
						return
					}
				}
			}
		}()
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		for r := range 2 {
			c := uniqueClient(t, stores[r], u)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 40 {
					res, err := c.Enqueue(ctx, syncArgs{CustomerID: 1, Note: strconv.Itoa(r*100 + i)}, nil)
					switch {
					case err != nil:
						errs <- err
						return
					case res.Replaced && res.Job.State != twicetype.JobStateAvailable:
						errs <- errors.New("replaced a holder that is " + string(res.Job.State))
						return
					case res.Duplicate && !res.Replaced && res.Job.State != twicetype.JobStateRunning:
						errs <- errors.New("a plain duplicate of a holder that is " + string(res.Job.State) + ", want running")
						return
					}
				}
			}()
		}
		wg.Wait()
		close(done)
		if err := <-workerErr; err != nil {
			t.Fatalf("worker: %v", err)
		}
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		c := uniqueClient(t, stores[0], u)
		for _, st := range []twicetype.JobState{twicetype.JobStateAvailable, twicetype.JobStateRunning} {
			res, err := c.JobList(ctx, &twice.JobListParams{JobFilter: twice.JobFilter{Kind: kind, State: st}, Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Jobs) > 1 {
				t.Fatalf("%d %s jobs, want at most 1", len(res.Jobs), st)
			}
		}
	})
}

// Options no store can honour are refused at registration and at
// enqueue, naming the kind and what to do.
func TestUniqueBadInput(t *testing.T) {
	nop := twice.HandlerFunc[syncArgs](func(context.Context, *twice.Job[syncArgs]) error { return nil })
	for _, tc := range []struct {
		name string
		u    twice.UniqueOpts
		want string
	}{
		{"unknown field", twice.UniqueOpts{ArgsFields: []string{"tenant"}}, `field "tenant"`},
		{"negative period", twice.UniqueOpts{ByPeriod: -time.Second}, "ByPeriod is -1s"},
		{"period under a second", twice.UniqueOpts{ByPeriod: 500 * time.Millisecond}, "at least 1s"},
		{"finished state alone", twice.UniqueOpts{ByStates: []twicetype.JobState{twicetype.JobStateCompleted}}, `lacks "available"`},
		{"half the states", twice.UniqueOpts{ByStates: []twicetype.JobState{twicetype.JobStateAvailable}}, `lacks "running"`},
		{"unknown state", twice.UniqueOpts{ByStates: []twicetype.JobState{twicetype.JobStateAvailable,
			twicetype.JobStateRunning, "canceled"}}, `"canceled", which is no job state`},
		{"discarded without dead", twice.UniqueOpts{ByStates: []twicetype.JobState{twicetype.JobStateAvailable,
			twicetype.JobStateRunning, twicetype.JobStateDiscarded}}, "add dead"},
		{"unknown conflict", twice.UniqueOpts{OnConflict: 7}, "OnConflict is 7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := tc.u
			err := twice.Register(twice.NewRegistry(), nop, &twice.KindOpts{Unique: &u})
			if err == nil || !strings.Contains(err.Error(), `"customer.sync.v1"`) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("register: %v; want an error naming the kind and %s", err, tc.want)
			}
			c := uniqueClient(t, newStore(t), nil)
			_, err = c.Enqueue(context.Background(), syncArgs{CustomerID: 1}, &twice.EnqueueOpts{Unique: &u})
			if !errors.Is(err, twice.ErrInvalidArgs) || !strings.Contains(err.Error(), `"customer.sync.v1"`) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("enqueue: %v; want ErrInvalidArgs naming the kind and %s", err, tc.want)
			}
		})
	}
	// Both unfinished states, in any order, are the default spelled out;
	// any finished state may be added to them.
	for _, states := range [][]twicetype.JobState{
		{twicetype.JobStateRunning, twicetype.JobStateAvailable},
		append(slices.Clone(twicetype.AllJobStates), twicetype.JobStateCompleted), // a repeat is harmless
	} {
		ok := twice.UniqueOpts{ByStates: states}
		if err := twice.Register(twice.NewRegistry(), nop, &twice.KindOpts{Unique: &ok}); err != nil {
			t.Fatalf("register with %v: %v", states, err)
		}
	}
}

func mustEnqueueRes(t testing.TB, c *twice.Client, args twice.Args, opts *twice.EnqueueOpts) *twice.EnqueueResult {
	t.Helper()
	res, err := c.Enqueue(context.Background(), args, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func noteOf(t testing.TB, row *twicetype.JobRow) string {
	t.Helper()
	var a syncArgs
	if err := json.Unmarshal(row.Args, &a); err != nil {
		t.Fatal(err)
	}
	return a.Note
}

// ByPeriod with completed among ByStates is "at most once per period, even
// after it ran": the completed job holds the period's key, so a second
// enqueue in the period is a duplicate of it, and one in the next period
// runs.
func TestUniqueByStatesOncePerPeriod(t *testing.T) {
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		reg := twice.NewRegistry()
		var runs sync.Map // job id → true
		twice.MustRegister(reg, twice.HandlerFunc[syncArgs](func(_ context.Context, j *twice.Job[syncArgs]) error {
			runs.Store(j.ID, true)
			return nil
		}), &twice.KindOpts{Unique: &twice.UniqueOpts{ByArgs: true, ByPeriod: time.Hour,
			ByStates: []twicetype.JobState{twicetype.JobStateAvailable, twicetype.JobStateRunning, twicetype.JobStateCompleted}}})
		c := startClient(t, store, testConfig(reg))
		enq := func(at time.Time) *twice.EnqueueResult {
			t.Helper()
			return mustEnqueueRes(t, c, syncArgs{CustomerID: 7}, &twice.EnqueueOpts{RunAt: at})
		}
		// Run times in the past are due at once; the hour is taken far
		// enough back that none of them is in the future.
		hour := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)

		first := enq(hour.Add(time.Minute))
		waitJob(t, store, first.Job.ID, "completed", isState(twicetype.JobStateCompleted))
		again := enq(hour.Add(59 * time.Minute))
		if !again.Duplicate || again.Job.ID != first.Job.ID || again.Job.State != twicetype.JobStateCompleted {
			t.Fatalf("enqueue in the same hour after it ran: duplicate %v of job %d (%s), want a duplicate of completed job %d",
				again.Duplicate, again.Job.ID, again.Job.State, first.Job.ID)
		}
		next := enq(hour.Add(time.Hour))
		if next.Duplicate {
			t.Fatalf("enqueue in the next hour: a duplicate of job %d, want a new job", next.Job.ID)
		}
		waitJob(t, store, next.Job.ID, "completed", isState(twicetype.JobStateCompleted))
		for _, id := range []int64{first.Job.ID, next.Job.ID} {
			if _, ok := runs.Load(id); !ok {
				t.Errorf("job %d never ran", id)
			}
		}
		if n := countSyncJobs(t, c); n != 2 {
			t.Errorf("%d jobs stored, want 2 (one per hour)", n)
		}
	})
}

// The default states still free the key when the job finishes: the
// enqueue after it ran is a new job.
func TestUniqueDefaultStatesFreeKeyOnCompletion(t *testing.T) {
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		reg := twice.NewRegistry()
		twice.MustRegister(reg, twice.HandlerFunc[syncArgs](func(context.Context, *twice.Job[syncArgs]) error { return nil }),
			&twice.KindOpts{Unique: &twice.UniqueOpts{ByArgs: true, ByPeriod: time.Hour}})
		c := startClient(t, store, testConfig(reg))
		at := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
		first := mustEnqueueRes(t, c, syncArgs{CustomerID: 7}, &twice.EnqueueOpts{RunAt: at})
		waitJob(t, store, first.Job.ID, "completed", isState(twicetype.JobStateCompleted))
		if again := mustEnqueueRes(t, c, syncArgs{CustomerID: 7}, &twice.EnqueueOpts{RunAt: at}); again.Duplicate {
			t.Fatalf("enqueue after it ran: a duplicate of job %d, want a new job", again.Job.ID)
		}
	})
}

// A retry by hand of a dead job whose key a completed job holds (completed
// among its ByStates) is refused with ErrUniqueConflict naming the holder;
// once retention (here a delete) removes the holder, the retry goes through.
func TestUniqueByStatesRetryHeld(t *testing.T) {
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		fail := true
		var mu sync.Mutex
		reg := twice.NewRegistry()
		twice.MustRegister(reg, twice.HandlerFunc[syncArgs](func(context.Context, *twice.Job[syncArgs]) error {
			mu.Lock()
			defer mu.Unlock()
			if fail {
				return twice.Permanent(errors.New("boom"))
			}
			return nil
		}), &twice.KindOpts{Unique: &twice.UniqueOpts{ByArgs: true,
			ByStates: []twicetype.JobState{twicetype.JobStateAvailable, twicetype.JobStateRunning, twicetype.JobStateCompleted}}})
		c := startClient(t, store, testConfig(reg))
		dead := mustEnqueueRes(t, c, syncArgs{CustomerID: 9}, nil)
		waitJob(t, store, dead.Job.ID, "dead", isState(twicetype.JobStateDead))
		mu.Lock()
		fail = false
		mu.Unlock()
		holder := mustEnqueueRes(t, c, syncArgs{CustomerID: 9}, nil)
		if holder.Duplicate {
			t.Fatalf("enqueue beside a dead job: a duplicate of job %d; dead is not among ByStates", holder.Job.ID)
		}
		waitJob(t, store, holder.Job.ID, "completed", isState(twicetype.JobStateCompleted))

		res, err := c.JobRetry(ctx, &twice.JobActionParams{IDs: []int64{dead.Job.ID}})
		if err != nil {
			t.Fatalf("JobRetry: %v", err)
		}
		if len(res.Jobs) != 1 || !errors.Is(res.Jobs[0].Err, twice.ErrUniqueConflict) ||
			!strings.Contains(res.Jobs[0].Err.Error(), strconv.FormatInt(holder.Job.ID, 10)) {
			t.Fatalf("retry held by a completed job: %+v; want ErrUniqueConflict naming job %d", res.Jobs, holder.Job.ID)
		}
		if _, err := c.JobDelete(ctx, &twice.JobActionParams{IDs: []int64{holder.Job.ID}}); err != nil {
			t.Fatalf("JobDelete: %v", err)
		}
		res, err = c.JobRetry(ctx, &twice.JobActionParams{IDs: []int64{dead.Job.ID}})
		if err != nil || len(res.Jobs) != 1 || !res.Jobs[0].Changed {
			t.Fatalf("retry after the holder was deleted: %+v, %v; want it retried", res, err)
		}
		waitJob(t, store, dead.Job.ID, "completed", isState(twicetype.JobStateCompleted))
	})
}
