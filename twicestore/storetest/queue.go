package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// Queues as a whole: pause and resume, listing, stranded queues.
var queueTests = []test{
	{"PauseStopsFetch", testPauseStopsFetch},
	{"PauseUntil", testPauseUntil},
	{"PauseRefusesBadInput", testPauseBadInput},
	{"PauseInTx", testPauseInTx},
	{"List", testQueueList},
	{"Stranded", testQueueStranded},
}

func (e *env) pause(p *twicestore.QueuePauseParams) {
	e.t.Helper()
	if err := e.s.QueuePause(e.ctx, p); err != nil {
		e.t.Fatalf("QueuePause(%q): %v", p.Queue, err)
	}
}

func (e *env) resume(queue string, now time.Time) bool {
	e.t.Helper()
	res, err := e.s.QueueResume(e.ctx, &twicestore.QueueResumeParams{Queue: queue, Now: now})
	if err != nil {
		e.t.Fatalf("QueueResume(%q): %v", queue, err)
	}
	return res.Resumed
}

func (e *env) queues(now time.Time) []twicetype.QueueInfo {
	e.t.Helper()
	res, err := e.s.QueueList(e.ctx, &twicestore.QueueListParams{Now: now})
	if err != nil {
		e.t.Fatalf("QueueList: %v", err)
	}
	return res.Queues
}

func (e *env) queue(now time.Time, name string) twicetype.QueueInfo {
	e.t.Helper()
	for _, q := range e.queues(now) {
		if q.Name == name {
			return q
		}
	}
	e.t.Fatalf("QueueList at %v has no queue %q", now, name)
	return twicetype.QueueInfo{}
}

func testPauseStopsFetch(t *testing.T, e *env) {
	const kind = "storetest.pause.v1"
	j := e.insertOne(e.job(kind))
	other := e.job(kind)
	other.Queue = "other"
	e.insertOne(other)

	e.pause(&twicestore.QueuePauseParams{Queue: "default", By: "ops", Reason: "db migration", Now: e.base})
	if got := e.fetch(e.at(time.Minute), 10, "node-a", kind); len(got) != 0 {
		t.Fatalf("fetched %v from a paused queue", ids(got))
	}
	// Other queues go on.
	if got := e.fetchWith(&twicestore.JobFetchParams{Queue: "other", Kinds: []string{kind}, Limit: 10, Node: "node-a",
		Now: e.at(time.Minute), LeaseUntil: e.at(2 * time.Minute)}); len(got) != 1 {
		t.Fatalf("fetched %d jobs from an unpaused queue, want 1", len(got))
	}
	checkJob(t, "job of a paused queue", e.get(j.ID), j) // attempts kept, nothing touched
	q := e.queue(e.at(time.Minute), "default")
	if !q.Paused || !q.PausedAt.Equal(e.base) || !q.Until.IsZero() || q.By != "ops" || q.Reason != "db migration" || q.Due != 1 {
		t.Fatalf("paused queue listed as %+v", q)
	}

	stats, err := e.s.JobQueueStats(e.ctx, &twicestore.JobQueueStatsParams{Now: e.at(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range stats.Queues {
		if st.Paused != (st.Queue == "default") {
			t.Errorf("JobQueueStats: queue %q Paused = %v", st.Queue, st.Paused)
		}
	}
	if !e.resume("default", e.at(time.Minute)) {
		t.Fatal("QueueResume of a paused queue: Resumed = false")
	}
	if e.resume("default", e.at(time.Minute)) {
		t.Fatal("second QueueResume: Resumed = true")
	}
	got := e.fetch(e.at(time.Minute), 10, "node-a", kind)
	if len(got) != 1 || got[0].ID != j.ID || got[0].Attempt != 1 {
		t.Fatalf("after resume fetched %+v, want job %d at attempt 1", got, j.ID)
	}
}

func testPauseUntil(t *testing.T, e *env) {
	const kind = "storetest.pauseuntil.v1"
	j := e.insertOne(e.job(kind))
	until := e.at(10 * time.Minute)
	e.pause(&twicestore.QueuePauseParams{Queue: "default", Until: until, By: "ops", Now: e.base})
	// A second pause replaces the first.
	e.pause(&twicestore.QueuePauseParams{Queue: "default", Until: until, By: "ops2", Reason: "longer", Now: e.at(time.Second)})

	if got := e.fetch(e.at(5*time.Minute), 10, "node-a", kind); len(got) != 0 {
		t.Fatalf("fetched %v before the pause ran out", ids(got))
	}
	q := e.queue(e.at(5*time.Minute), "default")
	if !q.Paused || !q.Until.Equal(until) || q.By != "ops2" || q.Reason != "longer" || !q.PausedAt.Equal(e.at(time.Second)) {
		t.Fatalf("queue paused until %v listed as %+v", until, q)
	}
	// Once Until has passed, the queue is not paused, without a resume.
	if q := e.queue(until, "default"); q.Paused || q.By != "" {
		t.Fatalf("queue at its Until listed as %+v, want not paused", q)
	}
	if got := e.fetch(until, 10, "node-a", kind); len(got) != 1 || got[0].ID != j.ID {
		t.Fatalf("fetch once the pause ran out = %v, want [%d]", ids(got), j.ID)
	}
	if e.resume("default", e.at(time.Hour)) {
		t.Fatal("QueueResume of a pause that ran out: Resumed = true")
	}
}

func testPauseBadInput(t *testing.T, e *env) {
	for _, p := range []*twicestore.QueuePauseParams{
		{Queue: "", Now: e.base},
		{Queue: "default", Until: e.at(-time.Second), Now: e.base},
		{Queue: "default", Until: e.base, Now: e.base},
	} {
		if err := e.s.QueuePause(e.ctx, p); err == nil {
			t.Errorf("QueuePause(%+v) accepted", p)
		}
	}
	for _, q := range e.queues(e.base) {
		if q.Paused {
			t.Errorf("a refused pause paused %+v", q)
		}
	}
}

func testPauseInTx(t *testing.T, e *env) {
	const kind = "storetest.pausetx.v1"
	e.insertOne(e.job(kind))
	tx := e.begin()
	if err := tx.QueuePause(e.ctx, &twicestore.QueuePauseParams{Queue: "default", Now: e.base}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.fetch(e.base, 10, "node-a", kind); len(got) != 1 {
		t.Fatalf("a rolled-back pause held the queue: fetched %d", len(got))
	}
}

func testQueueList(t *testing.T, e *env) {
	const kind = "storetest.queuelist.v1"
	inQueue := func(q string, runAt time.Time) *twicestore.JobInsertParams {
		p := e.job(kind)
		p.Queue, p.RunAt = q, runAt
		return p
	}
	now := e.at(time.Minute)
	e.insert(inQueue("a", e.base), inQueue("a", e.base), inQueue("a", e.base), inQueue("a", e.at(time.Hour)))
	e.fetchWith(&twicestore.JobFetchParams{Queue: "a", Kinds: []string{kind}, Limit: 1, Node: "node-a",
		Now: e.base, LeaseUntil: e.at(time.Hour)})
	// A queue whose jobs all finished is not listed: finding it would
	// read the whole history.
	e.insert(inQueue("done", e.base))
	d := e.fetchWith(&twicestore.JobFetchParams{Queue: "done", Kinds: []string{kind}, Limit: 1, Node: "node-a",
		Now: e.base, LeaseUntil: e.at(time.Hour)})
	e.complete(d[0], e.base)
	// A paused queue with no jobs, and a queue only a node works.
	e.pause(&twicestore.QueuePauseParams{Queue: "b", By: "ops", Now: e.base})
	e.heartbeat(&twicetype.Node{ID: "n1", Queues: []string{"c", "a"}, StartedAt: e.base, HeartbeatAt: e.base})

	want := []twicetype.QueueInfo{
		{Name: "a", Due: 2, Scheduled: 1, Running: 1},
		{Name: "b", Paused: true, PausedAt: e.base, By: "ops"},
		{Name: "c"},
	}
	got := e.queues(now)
	if !slices.EqualFunc(got, want, func(a, b twicetype.QueueInfo) bool {
		return a.Name == b.Name && a.Paused == b.Paused && a.PausedAt.Equal(b.PausedAt) && a.Until.Equal(b.Until) &&
			a.By == b.By && a.Reason == b.Reason && a.Due == b.Due && a.Scheduled == b.Scheduled && a.Running == b.Running
	}) {
		t.Fatalf("QueueList = %+v,\nwant %+v", got, want)
	}
}

func testQueueStranded(t *testing.T, e *env) {
	const kind = "storetest.stranded.v1"
	inQueue := func(q string, created time.Time) *twicestore.JobInsertParams {
		p := e.job(kind)
		p.Queue, p.CreatedAt = q, created
		return p
	}
	e.insert(inQueue("default", e.base), inQueue("lonely", e.at(-time.Hour)), inQueue("lonely", e.base),
		inQueue("stale", e.base), inQueue("zeta", e.base))
	e.heartbeat(&twicetype.Node{ID: "live", Kinds: []string{kind}, Queues: []string{"default", "zeta"},
		StartedAt: e.base, HeartbeatAt: e.base})
	e.heartbeat(&twicetype.Node{ID: "dead", Kinds: []string{kind}, Queues: []string{"stale"},
		StartedAt: e.at(-time.Hour), HeartbeatAt: e.at(-time.Hour)})
	// A running job in an unworked queue is not stranded: something holds it.
	e.insert(inQueue("held", e.base))
	e.fetchWith(&twicestore.JobFetchParams{Queue: "held", Kinds: []string{kind}, Limit: 1, Node: "gone",
		Now: e.base, LeaseUntil: e.at(time.Hour)})

	res, err := e.s.QueueStranded(e.ctx, &twicestore.QueueStrandedParams{AliveSince: e.at(-time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	want := []twicetype.StrandedQueue{
		{Queue: "lonely", Count: 2, Oldest: e.at(-time.Hour)},
		{Queue: "stale", Count: 1, Oldest: e.base},
	}
	if !slices.EqualFunc(res.Queues, want, func(a, b twicetype.StrandedQueue) bool {
		return a.Queue == b.Queue && a.Count == b.Count && a.Oldest.Equal(b.Oldest)
	}) {
		t.Fatalf("QueueStranded = %+v,\nwant %+v", res.Queues, want)
	}
}
