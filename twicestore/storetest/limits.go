package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

var limitTests = []test{
	{"GlobalCaps", testLimitGlobalCaps},
	{"GlobalSlotFreedByEveryExit", testLimitGlobalSlotFreed},
	{"GlobalLeavesOtherKinds", testLimitGlobalLeavesOtherKinds},
	{"GlobalConcurrentFetchers", testLimitGlobalConcurrent},
	{"PausedQueue", testLimitPausedQueue},
	{"PerKeyFIFO", testLimitPerKeyFIFO},
	{"PerKeyRetryHoldsLaterJobs", testLimitPerKeyRetry},
	{"PerKeyOrderSkipsRetries", testLimitPerKeySkipsRetries},
	{"PerKeyTwo", testLimitPerKeyTwo},
	{"PerKeyThrottledHeadDoesNotStarve", testLimitPerKeyHead},
	{"PerKeyConcurrentFetchers", testLimitPerKeyConcurrent},
	{"KeyTooLong", testLimitKeyTooLong},
	{"Rate", testLimitRate},
	{"KeyRate", testLimitKeyRate},
	{"RateStaleFetch", testLimitRateStaleFetch},
	{"RateFullKindLeavesOthers", testLimitRateFullKindLeavesOthers},
	{"List", testLimitList},
}

// fetchLimited leases up to limit jobs of kinds at now under limits.
func (e *env) fetchLimited(now time.Time, limit int, limits map[string]twicestore.KindLimit, kinds ...string) *twicestore.JobFetchResult {
	e.t.Helper()
	res, err := e.s.JobFetch(e.ctx, &twicestore.JobFetchParams{
		Queue: "default", Kinds: kinds, Limit: limit, Node: "node-a",
		Now: now, LeaseUntil: now.Add(time.Minute), Limits: limits,
	})
	if err != nil {
		e.t.Fatalf("JobFetch: %v", err)
	}
	return res
}

// keyed returns insert parameters for a job of kind with concurrency key.
func (e *env) keyed(kind, key string) *twicestore.JobInsertParams {
	p := e.job(kind)
	p.ConcurrencyKey = key
	return p
}

func (e *env) insertN(n int, mk func(i int) *twicestore.JobInsertParams) []int64 {
	e.t.Helper()
	ps := make([]*twicestore.JobInsertParams, n)
	for i := range ps {
		ps[i] = mk(i)
	}
	res := e.insert(ps...)
	out := make([]int64, n)
	for i, r := range res {
		out[i] = r.Job.ID
	}
	return out
}

// testLimitGlobalCaps: a kind with a global limit of 3 leases 3 of 10 due
// jobs however large the fetch, then none, reporting the rest throttled.
func testLimitGlobalCaps(t *testing.T, e *env) {
	const kind = "storetest.limit.global.v1"
	all := e.insertN(10, func(int) *twicestore.JobInsertParams { return e.job(kind) })
	lim := map[string]twicestore.KindLimit{kind: {Global: 3}}
	now := e.at(time.Second)
	first := e.fetchLimited(now, 10, lim, kind)
	if got := ids(first.Jobs); !slices.Equal(got, all[:3]) {
		t.Fatalf("first fetch leased %v, want the first 3 %v", got, all[:3])
	}
	if !first.Throttled {
		t.Errorf("first fetch: Throttled false, yet 7 due jobs were held back")
	}
	second := e.fetchLimited(now, 10, lim, kind)
	if len(second.Jobs) != 0 || !second.Throttled {
		t.Errorf("second fetch leased %v (Throttled %v), want none, throttled", ids(second.Jobs), second.Throttled)
	}
	// The limit is the store's: a fetch that states none takes the rest.
	if got := e.fetch(now, 10, "node-b", kind); len(got) != 7 {
		t.Errorf("unlimited fetch leased %d jobs, want 7", len(got))
	}
	// Nothing left due: not throttled.
	if res := e.fetchLimited(now, 10, lim, kind); len(res.Jobs) != 0 || res.Throttled {
		t.Errorf("fetch with nothing due: %v, Throttled %v; want none, not throttled", ids(res.Jobs), res.Throttled)
	}
}

// testLimitGlobalSlotFreed: a slot frees when its job leaves running by
// any way: completion, a retry outcome, a put-back (refunded attempt), a
// cancel, a rescue after its lease expired. Usage is derived from the rows,
// so there is nothing to release by hand.
func testLimitGlobalSlotFreed(t *testing.T, e *env) {
	const kind = "storetest.limit.freed.v1"
	e.insertN(20, func(int) *twicestore.JobInsertParams { return e.job(kind) })
	lim := map[string]twicestore.KindLimit{kind: {Global: 2}}
	now := e.at(time.Second)
	one := func(what string) *twicetype.JobRow {
		t.Helper()
		res := e.fetchLimited(now, 10, lim, kind)
		if len(res.Jobs) != 1 {
			t.Fatalf("after %s: fetch leased %v, want exactly the one freed slot", what, ids(res.Jobs))
		}
		return res.Jobs[0]
	}
	held := e.fetchLimited(now, 10, lim, kind).Jobs
	if len(held) != 2 {
		t.Fatalf("leased %d jobs, want 2", len(held))
	}
	a, b := held[0], held[1]

	e.complete(a, now)
	a = one("completion")

	e.finish(&twicestore.JobOutcome{ID: a.ID, Epoch: a.Epoch, State: twicetype.JobStateAvailable,
		RunAt: e.at(time.Hour), Error: &twicetype.AttemptError{Attempt: a.Attempt, At: now, Error: "try later"}})
	a = one("a retry outcome")

	e.finish(&twicestore.JobOutcome{ID: a.ID, Epoch: a.Epoch, State: twicetype.JobStateAvailable,
		RunAt: e.at(time.Hour), RefundAttempt: true})
	a = one("a put-back on shutdown")

	e.cancel("ops", "stop it", now, a.ID)
	e.finish(&twicestore.JobOutcome{ID: a.ID, Epoch: a.Epoch, State: twicetype.JobStateCancelled, FinishedAt: now})
	a = one("a cancel")

	// Both leases expire; the rescue frees both slots.
	later := now.Add(2 * time.Minute)
	if r := e.rescue(later, 0); len(r.Requeued)+len(r.Dead) != 2 {
		t.Fatalf("rescue requeued %v, dead %v; want the 2 expired leases (%d, %d)", r.Requeued, r.Dead, a.ID, b.ID)
	}
	if res := e.fetchLimited(later, 10, lim, kind); len(res.Jobs) != 2 {
		t.Errorf("after a rescue: fetch leased %v, want 2", ids(res.Jobs))
	}
}

// testLimitGlobalLeavesOtherKinds: in one fetch, a limited kind takes its
// room and the unlimited kinds of the queue the rest of the Limit, in fetch
// order.
func testLimitGlobalLeavesOtherKinds(t *testing.T, e *env) {
	const limited, plain = "storetest.limit.mixed.v1", "storetest.limit.plain.v1"
	e.insertN(5, func(int) *twicestore.JobInsertParams { return e.job(limited) })
	e.insertN(5, func(int) *twicestore.JobInsertParams { return e.job(plain) })
	res := e.fetchLimited(e.at(time.Second), 4, map[string]twicestore.KindLimit{limited: {Global: 1}}, limited, plain)
	count := map[string]int{}
	for _, j := range res.Jobs {
		count[j.Kind]++
	}
	if count[limited] != 1 || count[plain] != 3 {
		t.Errorf("fetch of 4 leased %v, want 1 %s and 3 %s", count, limited, plain)
	}
	if !slices.IsSortedFunc(res.Jobs, func(a, b *twicetype.JobRow) int { return int(a.ID - b.ID) }) {
		t.Errorf("jobs not in fetch order: %v", ids(res.Jobs))
	}
}

// testLimitGlobalConcurrent has 8 fetchers race over 200 jobs of a kind
// limited to 5, in two queues (fetchers of different queues never meet on
// a row, so only the limit keeps them apart). Each counts the kind's running jobs in the store right
// after its fetch, while it still holds what it leased, then finishes
// them: no count may exceed 5, and every job runs once.
func testLimitGlobalConcurrent(t *testing.T, e *env) {
	const (
		kind     = "storetest.limit.race.v1"
		jobs     = 200
		fetchers = 8
		limit    = 5
	)
	queues := []string{"default", "other"}
	e.insertN(jobs, func(i int) *twicestore.JobInsertParams {
		p := e.job(kind)
		p.Queue = queues[i%2]
		return p
	})
	lim := map[string]twicestore.KindLimit{kind: {Global: limit}}
	var (
		peak atomic.Int64
		done atomic.Int64
		mu   sync.Mutex
		seen = map[int64]int{}
		wg   sync.WaitGroup
	)
	for f := range fetchers {
		wg.Go(func() {
			node := fmt.Sprintf("node-%d", f)
			for done.Load() < jobs {
				res, err := e.s.JobFetch(e.ctx, &twicestore.JobFetchParams{
					Queue: queues[f%2], Kinds: []string{kind}, Limit: 3, Node: node,
					Now: e.at(time.Minute), LeaseUntil: e.at(time.Hour), Limits: lim,
				})
				if err != nil {
					t.Errorf("%s: JobFetch: %v", node, err)
					return
				}
				if len(res.Jobs) == 0 {
					continue
				}
				c, err := e.s.JobCount(e.ctx, &twicestore.JobCountParams{Filter: twicestore.JobFilter{
					Kind: kind, State: twicetype.JobStateRunning}})
				if err != nil {
					t.Errorf("%s: JobCount: %v", node, err)
					return
				}
				n := int64(0)
				for _, c := range c.Counts {
					n += int64(c.Count)
				}
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				mu.Lock()
				for _, j := range res.Jobs {
					seen[j.ID]++
				}
				mu.Unlock()
				for _, j := range res.Jobs {
					r, err := e.s.JobFinish(e.ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{
						ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted, FinishedAt: e.at(time.Minute)}}})
					if err != nil || !r.Applied[0] {
						t.Errorf("%s: finish job %d: %v", node, j.ID, err) // counted done: see below
					}
					done.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > limit {
		t.Errorf("the store counted %d jobs running at once, over the global limit of %d", p, limit)
	}
	if len(seen) != jobs {
		t.Errorf("%d distinct jobs ran, want %d", len(seen), jobs)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("job %d leased %d times", id, n)
		}
	}
	t.Logf("peak %d running of limit %d", peak.Load(), limit)
}

// testLimitPausedQueue: a paused queue leases nothing, limited or not.
func testLimitPausedQueue(t *testing.T, e *env) {
	const kind = "storetest.limit.paused.v1"
	e.insertN(3, func(int) *twicestore.JobInsertParams { return e.job(kind) })
	e.pause(&twicestore.QueuePauseParams{Queue: "default", Now: e.base})
	if res := e.fetchLimited(e.at(time.Second), 10, map[string]twicestore.KindLimit{kind: {Global: 2}}, kind); len(res.Jobs) != 0 {
		t.Errorf("paused queue leased %v", ids(res.Jobs))
	}
}

// testLimitPerKeyFIFO: with one per key, each key's jobs run one at a
// time in enqueue order, keys side by side; jobs with no key are not
// held back by key.
func testLimitPerKeyFIFO(t *testing.T, e *env) {
	const kind = "storetest.limit.key.v1"
	keys := []string{"a", "b", "a", "b", "a", "", ""}
	all := e.insertN(len(keys), func(i int) *twicestore.JobInsertParams { return e.keyed(kind, keys[i]) })
	lim := map[string]twicestore.KindLimit{kind: {PerKey: 1}}
	now := e.at(time.Second)
	first := e.fetchLimited(now, 10, lim, kind)
	if got, want := ids(first.Jobs), []int64{all[0], all[1], all[5], all[6]}; !slices.Equal(got, want) {
		t.Fatalf("first fetch leased %v, want a's and b's first and both unkeyed %v", got, want)
	}
	if !first.Throttled {
		t.Errorf("first fetch: Throttled false, yet a's and b's later jobs wait")
	}
	if res := e.fetchLimited(now, 10, lim, kind); len(res.Jobs) != 0 {
		t.Fatalf("second fetch leased %v while each key runs one", ids(res.Jobs))
	}
	e.complete(first.Jobs[0], now) // a's first
	if got := ids(e.fetchLimited(now, 10, lim, kind).Jobs); !slices.Equal(got, []int64{all[2]}) {
		t.Fatalf("after a's first finished: leased %v, want a's second %d", got, all[2])
	}
}

// testLimitPerKeyRetry: a job waiting for its retry holds its key's later
// jobs back until it has run: order by key includes retries.
func testLimitPerKeyRetry(t *testing.T, e *env) {
	const kind = "storetest.limit.keyretry.v1"
	all := e.insertN(2, func(int) *twicestore.JobInsertParams { return e.keyed(kind, "k") })
	lim := map[string]twicestore.KindLimit{kind: {PerKey: 1}}
	now := e.at(time.Second)
	j := e.fetchLimited(now, 10, lim, kind).Jobs[0]
	retryAt := e.at(time.Hour)
	e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateAvailable,
		RunAt: retryAt, Error: &twicetype.AttemptError{Attempt: j.Attempt, At: now, Error: "boom"}})
	if res := e.fetchLimited(now, 10, lim, kind); len(res.Jobs) != 0 {
		t.Fatalf("leased %v while the key's first job waits for its retry", ids(res.Jobs))
	}
	if got := ids(e.fetchLimited(retryAt, 10, lim, kind).Jobs); !slices.Equal(got, all[:1]) {
		t.Fatalf("at the retry time leased %v, want the retried %d alone", got, all[0])
	}
}

// testLimitPerKeySkipsRetries: with KeyOrderSkipsRetries a job waiting for
// its retry no longer holds its key's later jobs back, but the per-key
// limit still holds: the retry waits for the later job running in its
// place, and once due it is back in line before the jobs enqueued after
// it. A job that never ran and is not due yet (scheduled) still holds the
// order.
func testLimitPerKeySkipsRetries(t *testing.T, e *env) {
	const kind = "storetest.limit.keyskip.v1"
	all := e.insertN(3, func(int) *twicestore.JobInsertParams { return e.keyed(kind, "k") })
	lim := map[string]twicestore.KindLimit{kind: {PerKey: 1, KeyOrderSkipsRetries: true}}
	now := e.at(time.Second)
	j := e.fetchLimited(now, 10, lim, kind).Jobs[0]
	if j.ID != all[0] {
		t.Fatalf("first fetch leased %d, want the key's first %d", j.ID, all[0])
	}
	retryAt := e.at(time.Hour)
	e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateAvailable,
		RunAt: retryAt, Error: &twicetype.AttemptError{Attempt: j.Attempt, At: now, Error: "boom"}})
	second := e.fetchLimited(now, 10, lim, kind)
	if got := ids(second.Jobs); !slices.Equal(got, all[1:2]) {
		t.Fatalf("while the first waits for its retry leased %v, want the second %d alone (limit 1)", got, all[1])
	}
	if res := e.fetchLimited(retryAt, 10, lim, kind); len(res.Jobs) != 0 {
		t.Fatalf("at the retry time leased %v while the second runs: the per-key limit must hold", ids(res.Jobs))
	}
	e.complete(second.Jobs[0], now)
	if got := ids(e.fetchLimited(retryAt, 10, lim, kind).Jobs); !slices.Equal(got, all[:1]) {
		t.Fatalf("at the retry time leased %v, want the retried %d back in line before %d", got, all[0], all[2])
	}

	// A scheduled job that never ran is not a retry: it keeps its place.
	const sched = "storetest.limit.keyskip.sched.v1"
	later := e.keyed(sched, "s")
	later.RunAt = e.at(time.Hour)
	first := e.insert(later)[0].Job.ID
	e.insert(e.keyed(sched, "s"))
	slim := map[string]twicestore.KindLimit{sched: {PerKey: 1, KeyOrderSkipsRetries: true}}
	if res := e.fetchLimited(now, 10, slim, sched); len(res.Jobs) != 0 {
		t.Fatalf("leased %v before the key's scheduled first job %d ran", ids(res.Jobs), first)
	}
}

// testLimitPerKeyTwo: two per key run at once, the key's first two.
func testLimitPerKeyTwo(t *testing.T, e *env) {
	const kind = "storetest.limit.keytwo.v1"
	all := e.insertN(5, func(int) *twicestore.JobInsertParams { return e.keyed(kind, "k") })
	lim := map[string]twicestore.KindLimit{kind: {PerKey: 2}}
	now := e.at(time.Second)
	first := e.fetchLimited(now, 10, lim, kind)
	if got := ids(first.Jobs); !slices.Equal(got, all[:2]) {
		t.Fatalf("leased %v, want the key's first two %v", got, all[:2])
	}
	e.complete(first.Jobs[1], now)
	if got := ids(e.fetchLimited(now, 10, lim, kind).Jobs); !slices.Equal(got, all[2:3]) {
		t.Fatalf("after one finished: leased %v, want %d", got, all[2])
	}
}

// testLimitPerKeyHead: a key with many jobs at the head of the queue,
// held back by its limit, does not fill the fetch: the other keys' jobs
// behind it are leased.
func testLimitPerKeyHead(t *testing.T, e *env) {
	const kind = "storetest.limit.keyhead.v1"
	e.insertN(50, func(int) *twicestore.JobInsertParams { return e.keyed(kind, "busy") })
	rest := e.insertN(3, func(i int) *twicestore.JobInsertParams { return e.keyed(kind, fmt.Sprint("k", i)) })
	lim := map[string]twicestore.KindLimit{kind: {PerKey: 1}}
	now := e.at(time.Second)
	if got := e.fetchLimited(now, 2, lim, kind).Jobs; len(got) != 2 {
		t.Fatalf("leased %d, want 2", len(got))
	}
	// busy's first and k0 run; busy's 49 others are ahead of k1 and k2.
	if got := ids(e.fetchLimited(now, 2, lim, kind).Jobs); !slices.Equal(got, rest[1:]) {
		t.Errorf("leased %v, want the keys behind the held-back head %v", got, rest[1:])
	}
}

// testLimitPerKeyConcurrent has 6 fetchers race over 20 keys × 10 jobs
// with one per key: no key ever has two jobs running, and each key's jobs
// start in enqueue order.
func testLimitPerKeyConcurrent(t *testing.T, e *env) {
	const (
		kind     = "storetest.limit.keyrace.v1"
		keys     = 20
		perKey   = 10
		fetchers = 6
	)
	jobKey := map[int64]string{}
	all := e.insertN(keys*perKey, func(i int) *twicestore.JobInsertParams { return e.keyed(kind, fmt.Sprint("k", i%keys)) })
	for i, id := range all {
		jobKey[id] = fmt.Sprint("k", i%keys)
	}
	lim := map[string]twicestore.KindLimit{kind: {PerKey: 1}}
	var (
		mu      sync.Mutex
		busy    = map[string]int64{} // key -> running job
		started = map[string][]int64{}
		done    atomic.Int64
		wg      sync.WaitGroup
	)
	for f := range fetchers {
		wg.Go(func() {
			node := fmt.Sprintf("node-%d", f)
			for done.Load() < int64(len(all)) {
				res, err := e.s.JobFetch(e.ctx, &twicestore.JobFetchParams{
					Queue: "default", Kinds: []string{kind}, Limit: 4, Node: node,
					Now: e.at(time.Minute), LeaseUntil: e.at(time.Hour), Limits: lim,
				})
				if err != nil {
					t.Errorf("%s: JobFetch: %v", node, err)
					return
				}
				mu.Lock()
				for _, j := range res.Jobs {
					k := jobKey[j.ID]
					if other, ok := busy[k]; ok {
						t.Errorf("key %s: job %d started while job %d runs", k, j.ID, other)
					}
					busy[k] = j.ID
					started[k] = append(started[k], j.ID)
				}
				mu.Unlock()
				for _, j := range res.Jobs {
					mu.Lock()
					delete(busy, jobKey[j.ID])
					mu.Unlock()
					// A failed finish is counted done all the same, so the
					// other fetchers stop rather than wait for it forever.
					if _, err := e.s.JobFinish(e.ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{{
						ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted, FinishedAt: e.at(time.Minute)}}}); err != nil {
						t.Errorf("%s: finish job %d: %v", node, j.ID, err)
					}
					done.Add(1)
				}
			}
		})
	}
	wg.Wait()
	for k, s := range started {
		if !slices.IsSorted(s) || len(s) != perKey {
			t.Errorf("key %s: jobs started in order %v, want %d in enqueue order", k, s, perKey)
		}
	}
}

// testLimitKeyTooLong: a concurrency key over MaxConcurrencyKeyBytes is
// refused with ErrConcurrencyKeyTooLong, and nothing is inserted.
func testLimitKeyTooLong(t *testing.T, e *env) {
	const kind = "storetest.limit.longkey.v1"
	_, err := e.s.JobInsertMany(e.ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{
		e.keyed(kind, "ok"), e.keyed(kind, strings.Repeat("k", twicestore.MaxConcurrencyKeyBytes+1))}})
	if !errors.Is(err, twicestore.ErrConcurrencyKeyTooLong) {
		t.Fatalf("insert of a %d-byte key: %v, want ErrConcurrencyKeyTooLong", twicestore.MaxConcurrencyKeyBytes+1, err)
	}
	if res := e.fetch(e.at(time.Second), 10, "node-a", kind); len(res) != 0 {
		t.Errorf("a refused batch stored %d jobs", len(res))
	}
	e.insert(e.keyed(kind, strings.Repeat("k", twicestore.MaxConcurrencyKeyBytes)))
}

// testLimitRate: 3 starts per second. Starts count, not running jobs:
// finishing frees nothing; the window (Now-Period, Now] frees a start
// exactly one period after it, which a throttled fetch reports as
// RetryAt.
func testLimitRate(t *testing.T, e *env) {
	const kind = "storetest.limit.rate.v1"
	e.insertN(10, func(int) *twicestore.JobInsertParams { return e.job(kind) })
	lim := map[string]twicestore.KindLimit{kind: {Rate: twicestore.RateLimit{Limit: 3, Period: time.Second}}}
	t0 := e.at(time.Second)
	first := e.fetchLimited(t0, 10, lim, kind)
	if len(first.Jobs) != 3 || !first.Throttled {
		t.Fatalf("leased %d (Throttled %v), want 3, throttled", len(first.Jobs), first.Throttled)
	}
	// The window's oldest start leaves it one period on.
	if !first.RetryAt.Equal(t0.Add(time.Second)) {
		t.Errorf("RetryAt = %s, want %s: when the first start leaves the window", first.RetryAt, t0.Add(time.Second))
	}
	for _, j := range first.Jobs {
		e.complete(j, t0)
	}
	// A fetch with no room left at all still says what it held back and
	// until when (SQLite answers it without running its lease).
	if res := e.fetchLimited(t0.Add(999*time.Millisecond), 10, lim, kind); len(res.Jobs) != 0 || !res.Throttled ||
		!res.RetryAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("within the first second leased %d (Throttled %v, RetryAt %s), want none, throttled until %s",
			len(res.Jobs), res.Throttled, res.RetryAt, t0.Add(time.Second))
	}
	if res := e.fetchLimited(t0.Add(time.Second), 2, lim, kind); len(res.Jobs) != 2 {
		t.Fatalf("one period later leased %d of 2, want 2", len(res.Jobs))
	}
	if res := e.fetchLimited(t0.Add(1500*time.Millisecond), 10, lim, kind); len(res.Jobs) != 1 {
		t.Fatalf("leased %d with one start left in the window, want 1", len(res.Jobs))
	}
}

// testLimitRateStaleFetch: a fetch whose Now is older than the Now of the
// fetch before it (it read its clock, then waited for the lock) still
// counts every start its window covers, although the fetch before it
// pruned the rate windows on its later clock: the window holds no more
// than the limit. Pruning exactly one window behind let it lease the
// limit again (4 starts in 950 ms against 2 a second).
func testLimitRateStaleFetch(t *testing.T, e *env) {
	const kind = "storetest.limit.ratestale.v1"
	e.insertN(4, func(int) *twicestore.JobInsertParams { return e.job(kind) })
	lim := map[string]twicestore.KindLimit{kind: {Rate: twicestore.RateLimit{Limit: 2, Period: time.Second}}}
	t0 := e.at(time.Second)
	if res := e.fetchLimited(t0, 10, lim, kind); len(res.Jobs) != 2 {
		t.Fatalf("leased %d, want the limit of 2", len(res.Jobs))
	}
	// A fetch of the kind in another queue, on a later clock: it leases
	// nothing, and prunes the windows.
	later := t0.Add(1050 * time.Millisecond)
	if _, err := e.s.JobFetch(e.ctx, &twicestore.JobFetchParams{
		Queue: "storetest-empty", Kinds: []string{kind}, Limit: 10, Node: "node-b",
		Now: later, LeaseUntil: later.Add(time.Minute), Limits: lim,
	}); err != nil {
		t.Fatal(err)
	}
	stale := t0.Add(950 * time.Millisecond)
	if res := e.fetchLimited(stale, 10, lim, kind); len(res.Jobs) != 0 {
		t.Fatalf("a fetch at %s leased %d: with the 2 starts at %s that makes %d in one window of 1s, over the limit of 2",
			stale.Sub(t0), len(res.Jobs), t0, 2+len(res.Jobs))
	}
}

// testLimitRateFullKindLeavesOthers: in a fetch of two rate-limited
// kinds, one whose window is full holds back only its own jobs.
func testLimitRateFullKindLeavesOthers(t *testing.T, e *env) {
	const full, free = "storetest.limit.ratefull.v1", "storetest.limit.ratefree.v1"
	e.insertN(6, func(i int) *twicestore.JobInsertParams { return e.job([]string{full, free}[i%2]) })
	lim := map[string]twicestore.KindLimit{
		full: {Rate: twicestore.RateLimit{Limit: 1, Period: time.Second}},
		free: {Rate: twicestore.RateLimit{Limit: 2, Period: time.Second}},
	}
	t0 := e.at(time.Second)
	if res := e.fetchLimited(t0, 10, lim, full); len(res.Jobs) != 1 {
		t.Fatalf("leased %d of kind %s, want its limit of 1", len(res.Jobs), full)
	}
	res := e.fetchLimited(t0.Add(time.Millisecond), 10, lim, full, free)
	if len(res.Jobs) != 2 || !res.Throttled {
		t.Fatalf("leased %d (Throttled %v), want the 2 of kind %s, throttled", len(res.Jobs), res.Throttled, free)
	}
	for _, j := range res.Jobs {
		if j.Kind != free {
			t.Fatalf("leased a job of kind %s, whose window is full", j.Kind)
		}
	}
}

// testLimitKeyRate: one start per key per second; keys side by side; a
// throttled key does not hold the others back.
func testLimitKeyRate(t *testing.T, e *env) {
	const kind = "storetest.limit.keyrate.v1"
	keys := []string{"a", "a", "a", "b", "b"}
	all := e.insertN(len(keys), func(i int) *twicestore.JobInsertParams { return e.keyed(kind, keys[i]) })
	lim := map[string]twicestore.KindLimit{kind: {KeyRate: twicestore.RateLimit{Limit: 1, Period: time.Second}}}
	t0 := e.at(time.Second)
	if got := ids(e.fetchLimited(t0, 10, lim, kind).Jobs); !slices.Equal(got, []int64{all[0], all[3]}) {
		t.Fatalf("leased %v, want one of each key %v", got, []int64{all[0], all[3]})
	}
	if got := e.fetchLimited(t0.Add(500*time.Millisecond), 10, lim, kind).Jobs; len(got) != 0 {
		t.Fatalf("leased %v within the second", ids(got))
	}
	if got := ids(e.fetchLimited(t0.Add(time.Second), 10, lim, kind).Jobs); !slices.Equal(got, []int64{all[1], all[4]}) {
		t.Fatalf("one second later leased %v, want %v", got, []int64{all[1], all[4]})
	}
}

// testLimitList: the usage report counts running jobs, due jobs, the due
// jobs held back, keys and rate starts.
func testLimitList(t *testing.T, e *env) {
	const kind, rated = "storetest.limit.list.v1", "storetest.limit.listrate.v1"
	keys := []string{"a", "a", "b", "b", "c"}
	e.insertN(len(keys), func(i int) *twicestore.JobInsertParams { return e.keyed(kind, keys[i]) })
	e.insertN(4, func(int) *twicestore.JobInsertParams { return e.job(rated) })
	sched := e.keyed(kind, "d")
	sched.RunAt = e.at(time.Hour)
	e.insert(sched)
	lim := map[string]twicestore.KindLimit{
		kind:  {Global: 2, PerKey: 1},
		rated: {Rate: twicestore.RateLimit{Limit: 1, Period: time.Minute}},
	}
	now := e.at(time.Second)
	e.fetchLimited(now, 10, lim, kind, rated) // a's first, b's first; rated's first
	res, err := e.s.LimitList(e.ctx, &twicestore.LimitListParams{Limits: lim, Now: now})
	if err != nil {
		t.Fatalf("LimitList: %v", err)
	}
	want := []twicestore.LimitUsage{
		// Due: a2, b2, c. a2 and b2 wait for their key; c for a global slot.
		{Kind: kind, Limit: lim[kind], Running: 2, Due: 3, Throttled: 3, Keys: 4, BusyKeys: 2},
		{Kind: rated, Limit: lim[rated], Running: 1, Due: 3, Throttled: 3, RateUsed: 1},
	}
	if !slices.Equal(res.Kinds, want) {
		t.Errorf("LimitList:\n got %+v\nwant %+v", res.Kinds, want)
	}
}
