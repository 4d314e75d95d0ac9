package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

var fetchTests = []test{
	{"OrderPriorityRunAtID", testFetchOrder},
	{"OnlyDue", testFetchOnlyDue},
	{"OnlyQueueAndKinds", testFetchQueueAndKinds},
	{"LeasesJob", testFetchLeases},
	{"NothingWithoutKindsOrLimit", testFetchNothing},
	{"ConcurrentFetchersLeaseEachJobOnce", testFetchConcurrent},
	{"PeeksMarkersOfNamedKinds", testFetchPeeks},
}

// testFetchPeeks: a fetch peeks, per job of a kind Peek names, the marker
// of the job's key under that kind's handler, and answers what MarkerPeek
// says, aligned with Jobs; other kinds, other handlers' markers and a
// fetch without Peek answer false.
func testFetchPeeks(t *testing.T, e *env) {
	const mail, audit, plain = "storetest.peek-mail.v1", "storetest.peek-audit.v1", "storetest.peek-plain.v1"
	var jobs []*twicestore.JobInsertParams
	for _, kind := range []string{mail, mail, mail, audit, audit, plain} {
		jobs = append(jobs, e.job(kind))
	}
	jobs[1].Key = `key "quoted" ü` // claimed below, as the other handler's too
	jobs[4].Key = jobs[1].Key
	e.insert(jobs...)
	e.claim("h.mail", jobs[0].Key, e.base)
	e.claim("h.mail", jobs[1].Key, e.base)
	e.claim("h.other", jobs[2].Key, e.base) // another handler's: not this kind's marker
	e.claim("h.audit", jobs[3].Key, e.base)
	e.claim("h.mail", jobs[5].Key, e.base) // a kind Peek does not name
	now := e.at(time.Hour)
	res, err := e.s.JobFetch(e.ctx, &twicestore.JobFetchParams{
		Queue: "default", Kinds: []string{mail, audit, plain}, Limit: 10, Node: "node-a",
		Now: now, LeaseUntil: now.Add(time.Minute),
		Peek: map[string]string{mail: "h.mail", audit: "h.audit"},
	})
	if err != nil {
		t.Fatalf("JobFetch: %v", err)
	}
	if len(res.Jobs) != len(jobs) || len(res.Processed) != len(res.Jobs) {
		t.Fatalf("fetched %d jobs with %d peeks, want %d of each", len(res.Jobs), len(res.Processed), len(jobs))
	}
	want := map[string]bool{jobs[0].MessageID: true, jobs[1].MessageID: true, jobs[3].MessageID: true}
	for i, j := range res.Jobs {
		if res.Processed[i] != want[j.MessageID] {
			t.Errorf("job %d (%s, key %q): processed=%v, want %v", j.ID, j.Kind, j.Key, res.Processed[i], want[j.MessageID])
		}
	}

	e.insert(e.job(mail))
	e.claim("h.mail", "unused", e.base)
	res, err = e.s.JobFetch(e.ctx, &twicestore.JobFetchParams{
		Queue: "default", Kinds: []string{mail}, Limit: 10, Node: "node-a", Now: now, LeaseUntil: now.Add(time.Minute),
	})
	if err != nil {
		t.Fatalf("JobFetch without Peek: %v", err)
	}
	if len(res.Jobs) != 1 || len(res.Processed) != 1 || res.Processed[0] {
		t.Fatalf("fetch without Peek: %d jobs, peeks %v; want one job, not processed", len(res.Jobs), res.Processed)
	}
}

func testFetchOrder(t *testing.T, e *env) {
	const kind = "storetest.order.v1"
	mk := func(priority int, runAt time.Duration) *twicestore.JobInsertParams {
		p := e.job(kind)
		p.Priority = priority
		p.RunAt = e.at(runAt)
		return p
	}
	res := e.insert(
		mk(2, 0),             // a: lowest priority, earliest
		mk(1, 2*time.Second), // b
		mk(1, time.Second),   // c
		mk(1, time.Second),   // d: same as c, larger id
	)
	a, b, c, d := res[0].Job.ID, res[1].Job.ID, res[2].Job.ID, res[3].Job.ID
	if c > d {
		c, d = d, c
	}
	now := e.at(time.Hour)
	if got, want := ids(e.fetch(now, 2, "node-a", kind)), []int64{c, d}; !slices.Equal(got, want) {
		t.Fatalf("first fetch of 2 = %v, want %v (priority 1, earliest run_at, then id)", got, want)
	}
	if got, want := ids(e.fetch(now, 10, "node-a", kind)), []int64{b, a}; !slices.Equal(got, want) {
		t.Fatalf("second fetch = %v, want %v", got, want)
	}
}

func testFetchOnlyDue(t *testing.T, e *env) {
	const kind = "storetest.due.v1"
	p := e.job(kind)
	p.RunAt = e.at(10 * time.Second)
	j := e.insertOne(p)
	if got := e.fetch(e.at(10*time.Second-time.Microsecond), 10, "node-a", kind); len(got) != 0 {
		t.Fatalf("fetched %v before its RunAt", ids(got))
	}
	if got := e.fetch(e.at(10*time.Second), 10, "node-a", kind); !slices.Equal(ids(got), []int64{j.ID}) {
		t.Fatalf("fetch at RunAt = %v, want [%d]", ids(got), j.ID)
	}
}

func testFetchQueueAndKinds(t *testing.T, e *env) {
	mk := func(kind, queue string) *twicestore.JobInsertParams {
		p := e.job(kind)
		p.Queue = queue
		return p
	}
	res := e.insert(
		mk("storetest.k1.v1", "q1"),
		mk("storetest.k2.v1", "q1"),
		mk("storetest.k1.v1", "q2"),
		mk("storetest.orphan.v1", "q1"), // no fetcher asks for this kind
	)
	got := e.fetchWith(&twicestore.JobFetchParams{
		Queue: "q1", Kinds: []string{"storetest.k1.v1", "storetest.k2.v1"}, Limit: 10,
		Node: "node-a", Now: e.at(time.Minute), LeaseUntil: e.at(2 * time.Minute),
	})
	if want := []int64{res[0].Job.ID, res[1].Job.ID}; !slices.Equal(sorted(ids(got)), sorted(want)) {
		t.Fatalf("fetch q1 = %v, want %v", ids(got), want)
	}
	// The other queue's job and the unhandled kind's job are untouched.
	checkJob(t, "job in another queue", e.get(res[2].Job.ID), res[2].Job)
	checkJob(t, "job of an unlisted kind", e.get(res[3].Job.ID), res[3].Job)
}

func testFetchLeases(t *testing.T, e *env) {
	const kind = "storetest.lease.v1"
	inserted := e.insertOne(e.job(kind))
	now, until := e.at(time.Second), e.at(5*time.Minute)
	got := e.fetchWith(&twicestore.JobFetchParams{
		Queue: "default", Kinds: []string{kind}, Limit: 1, Node: "node-a", Now: now, LeaseUntil: until,
	})
	if len(got) != 1 {
		t.Fatalf("fetched %d jobs, want 1", len(got))
	}
	want := *inserted
	want.State = twicetype.JobStateRunning
	want.Attempt = 1
	want.Epoch = 1
	want.LeaseUntil = until
	want.AttemptedBy = "node-a"
	checkJob(t, "fetched row", got[0], &want)
	checkJob(t, "JobGet after fetch", e.get(inserted.ID), &want)

	if again := e.fetch(e.at(time.Hour), 10, "node-b", kind); len(again) != 0 {
		t.Fatalf("a running job was fetched again: %v", ids(again))
	}

	// A retry makes it available; the next fetch bumps attempt and epoch again.
	e.finish(&twicestore.JobOutcome{ID: inserted.ID, Epoch: 1, State: twicetype.JobStateAvailable, RunAt: e.at(time.Minute)})
	second := e.fetchWith(&twicestore.JobFetchParams{
		Queue: "default", Kinds: []string{kind}, Limit: 1, Node: "node-b",
		Now: e.at(time.Minute), LeaseUntil: e.at(10 * time.Minute),
	})
	if len(second) != 1 {
		t.Fatalf("refetch got %d jobs, want 1", len(second))
	}
	if j := second[0]; j.Attempt != 2 || j.Epoch != 2 || j.AttemptedBy != "node-b" || !j.LeaseUntil.Equal(e.at(10*time.Minute)) {
		t.Fatalf("refetched attempt %d, epoch %d, node %q, lease %v; want 2, 2, node-b, %v",
			j.Attempt, j.Epoch, j.AttemptedBy, j.LeaseUntil, e.at(10*time.Minute))
	}
}

func testFetchNothing(t *testing.T, e *env) {
	const kind = "storetest.nothing.v1"
	e.insertOne(e.job(kind))
	if got := e.fetch(e.at(time.Hour), 10, "node-a"); len(got) != 0 {
		t.Errorf("fetch with no kinds got %v", ids(got))
	}
	if got := e.fetch(e.at(time.Hour), 0, "node-a", kind); len(got) != 0 {
		t.Errorf("fetch with Limit 0 got %v", ids(got))
	}
	if got := e.fetch(e.at(time.Hour), 10, "node-a", kind); len(got) != 1 {
		t.Errorf("the job was touched: a real fetch then got %d jobs, want 1", len(got))
	}
}

// testFetchConcurrent has several fetchers race over one backlog: each job
// must be leased exactly once.
func testFetchConcurrent(t *testing.T, e *env) {
	const (
		kind     = "storetest.race.v1"
		jobs     = 200
		fetchers = 8
	)
	var ps []*twicestore.JobInsertParams
	for range jobs {
		ps = append(ps, e.job(kind))
	}
	e.insert(ps...)

	var (
		mu    sync.Mutex
		count = map[int64]int{}
		wg    sync.WaitGroup
	)
	for f := range fetchers {
		wg.Go(func() {
			node := fmt.Sprintf("node-%d", f)
			for {
				res, err := e.s.JobFetch(e.ctx, &twicestore.JobFetchParams{
					Queue: "default", Kinds: []string{kind}, Limit: 3, Node: node,
					Now: e.at(time.Minute), LeaseUntil: e.at(time.Hour),
				})
				if err != nil {
					t.Errorf("%s: JobFetch: %v", node, err)
					return
				}
				if len(res.Jobs) == 0 {
					return
				}
				mu.Lock()
				for _, j := range res.Jobs {
					count[j.ID]++
					if j.AttemptedBy != node || j.Epoch != 1 {
						t.Errorf("job %d fetched by %s has node %q, epoch %d", j.ID, node, j.AttemptedBy, j.Epoch)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(count) != jobs {
		t.Errorf("%d distinct jobs fetched, want %d", len(count), jobs)
	}
	for id, n := range count {
		if n != 1 {
			t.Errorf("job %d fetched %d times", id, n)
		}
	}
}
