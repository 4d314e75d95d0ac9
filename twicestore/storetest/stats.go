package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
)

var statsTests = []test{
	{"Throughput", testThroughput},
	{"ThroughputRefusesEmptyWindow", testThroughputBadWindow},
	{"QueueStats", testQueueStats},
}

func testThroughput(t *testing.T, e *env) {
	const kind = "storetest.throughput.v1"
	for range 6 {
		e.insertOne(e.job(kind))
	}
	done := func(at time.Duration) { e.complete(e.fetchOne(e.base, kind), e.at(at)) }
	done(-time.Second)                 // before the window
	done(time.Minute)                  // bucket 1
	done(time.Minute + 59*time.Second) // bucket 1, its last second
	e.kill(kind, e.at(2*time.Minute))  // bucket 2, dead
	done(5*time.Minute + time.Second)  // bucket 5
	done(10 * time.Minute)             // at Until: outside
	e.insertOne(e.job(kind))           // still available: not counted

	res, err := e.s.JobThroughput(e.ctx, &twicestore.JobThroughputParams{
		Since: e.base, Until: e.at(10 * time.Minute), Bucket: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []twicestore.ThroughputBucket{
		{Start: e.at(time.Minute), Completed: 2},
		{Start: e.at(2 * time.Minute), Dead: 1},
		{Start: e.at(5 * time.Minute), Completed: 1},
	}
	if !slices.EqualFunc(res.Buckets, want, func(a, b twicestore.ThroughputBucket) bool {
		return a.Start.Equal(b.Start) && a.Completed == b.Completed && a.Dead == b.Dead
	}) {
		t.Fatalf("JobThroughput = %+v, want %+v", res.Buckets, want)
	}
}

func testThroughputBadWindow(t *testing.T, e *env) {
	for _, p := range []*twicestore.JobThroughputParams{
		{Since: e.base, Until: e.at(time.Hour)},
		{Since: e.base, Until: e.at(time.Hour), Bucket: -time.Minute},
		{Since: e.base, Until: e.base, Bucket: time.Minute},
	} {
		if _, err := e.s.JobThroughput(e.ctx, p); err == nil {
			t.Errorf("JobThroughput(%+v) succeeded; want an error", p)
		}
	}
}

func testQueueStats(t *testing.T, e *env) {
	at := func(queue string, d time.Duration) *twicestore.JobInsertParams {
		p := e.job("storetest.qstats.v1")
		p.Queue, p.RunAt = queue, e.at(d)
		return p
	}
	e.insert(at("q1", -2*time.Minute), at("q1", -time.Minute), at("q1", 0), at("q1", time.Hour), at("q2", time.Hour))
	running := e.job("storetest.qstats-run.v1")
	running.RunAt = e.at(-time.Hour)
	e.insertOne(running)
	e.fetchOne(e.base, "storetest.qstats-run.v1") // running: not waiting

	res, err := e.s.JobQueueStats(e.ctx, &twicestore.JobQueueStatsParams{Now: e.base})
	if err != nil {
		t.Fatal(err)
	}
	want := []twicestore.QueueStat{
		{Queue: "q1", Due: 3, Scheduled: 1, OldestDue: e.at(-2 * time.Minute)},
		{Queue: "q2", Scheduled: 1},
	}
	if !slices.EqualFunc(res.Queues, want, func(a, b twicestore.QueueStat) bool {
		return a.Queue == b.Queue && a.Due == b.Due && a.Scheduled == b.Scheduled && a.OldestDue.Equal(b.OldestDue)
	}) {
		t.Fatalf("JobQueueStats = %+v, want %+v", res.Queues, want)
	}
}
