package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// On SQLite a transaction holds the database's only write lock, so the
// transaction check only reads through the store while one is open.
var scheduleTests = []test{
	{"FirstTickFires", testScheduleFirst},
	{"SameTickDoesNotFireAgain", testScheduleSameTick},
	{"EarlierTickDoesNotFire", testScheduleEarlierTick},
	{"LaterTickFires", testScheduleLaterTick},
	{"SkippedTick", testScheduleSkipped},
	{"ConcurrentTicksFireOnce", testScheduleConcurrent},
	{"UniqueKeyHeld", testScheduleUniqueHeld},
	{"AtomicWithTx", testScheduleTx},
	{"ListOrderedByName", testScheduleOrder},
	{"ZeroNowIsNowZeroNextAtUnset", testScheduleZeroTimes},
	{"InvalidParams", testScheduleInvalid},
	{"EmptyList", testScheduleEmpty},
	{"TickHistory", testScheduleTickHistory},
	{"TickHistoryBounded", testScheduleTickHistoryBounded},
	{"Remove", testScheduleRemove},
	{"RemoveUnknown", testScheduleRemoveUnknown},
	{"RemoveInTx", testScheduleRemoveTx},
}

// scheduleKind is the job kind of the suite's schedules.
const scheduleKind = "storetest.schedule.v1"

// tickParams returns the parameters of an enqueued tick of the schedule
// name at tick, with a job due at tick and the next tick a minute later.
func (e *env) tickParams(name string, tick time.Time) *twicestore.ScheduleTickParams {
	job := e.job(scheduleKind)
	job.RunAt, job.CreatedAt = tick, tick
	return &twicestore.ScheduleTickParams{
		Name:    name,
		Kind:    scheduleKind,
		Spec:    "@every 1m",
		TickAt:  tick,
		NextAt:  tick.Add(time.Minute),
		Outcome: twicetype.ScheduleEnqueued,
		Job:     job,
		Now:     tick.Add(time.Millisecond),
	}
}

// skippedParams returns the parameters of a skipped tick: no job.
func (e *env) skippedParams(name string, tick time.Time) *twicestore.ScheduleTickParams {
	p := e.tickParams(name, tick)
	p.Outcome, p.Job = twicetype.ScheduleSkipped, nil
	return p
}

func (e *env) tick(ex twicestore.Executor, p *twicestore.ScheduleTickParams) *twicestore.ScheduleTickResult {
	e.t.Helper()
	res, err := ex.ScheduleTick(e.ctx, p)
	if err != nil {
		e.t.Fatalf("ScheduleTick(%s at %s): %v", p.Name, p.TickAt, err)
	}
	if res == nil {
		e.t.Fatalf("ScheduleTick(%s at %s) returned a nil result", p.Name, p.TickAt)
	}
	if !res.Fired && res.Job != nil {
		e.t.Fatalf("ScheduleTick(%s at %s) did not fire, yet returned job %d", p.Name, p.TickAt, res.Job.ID)
	}
	return res
}

// tickFires ticks and fails unless the tick fired.
func (e *env) tickFires(ex twicestore.Executor, p *twicestore.ScheduleTickParams) *twicestore.ScheduleTickResult {
	e.t.Helper()
	res := e.tick(ex, p)
	if !res.Fired {
		e.t.Fatalf("ScheduleTick(%s at %s): Fired = false, want true", p.Name, p.TickAt)
	}
	return res
}

// tickHeld ticks and fails if the tick fired.
func (e *env) tickHeld(ex twicestore.Executor, p *twicestore.ScheduleTickParams) {
	e.t.Helper()
	if res := e.tick(ex, p); res.Fired {
		e.t.Fatalf("ScheduleTick(%s at %s): Fired = true, want false", p.Name, p.TickAt)
	}
}

func (e *env) schedules(ex twicestore.Executor) []twicetype.Schedule {
	e.t.Helper()
	res, err := ex.ScheduleList(e.ctx, &twicestore.ScheduleListParams{})
	if err != nil {
		e.t.Fatalf("ScheduleList: %v", err)
	}
	return res.Schedules
}

// scheduleJobs lists the jobs of the suite's schedules, newest first.
func (e *env) scheduleJobs() []*twicetype.JobRow {
	e.t.Helper()
	res, err := e.s.JobList(e.ctx, &twicestore.JobListParams{Filter: twicestore.JobFilter{Kind: scheduleKind}})
	if err != nil {
		e.t.Fatalf("JobList: %v", err)
	}
	return res.Jobs
}

// recorded is the schedule a fired tick p records, with the job it
// enqueued (0 for none).
func recorded(p *twicestore.ScheduleTickParams, jobID int64) twicetype.Schedule {
	return twicetype.Schedule{
		Name: p.Name, Kind: p.Kind, Spec: p.Spec,
		LastTickAt: p.TickAt, LastOutcome: p.Outcome, LastJobID: jobID,
		NextAt: p.NextAt, UpdatedAt: p.Now,
	}
}

// checkSchedules fails the test unless got and want hold the same schedules
// in the same order, times compared with Equal and required in UTC.
func checkSchedules(t *testing.T, what string, got, want []twicetype.Schedule) {
	t.Helper()
	if !slices.EqualFunc(got, want, func(a, b twicetype.Schedule) bool {
		return a.Name == b.Name && a.Kind == b.Kind && a.Spec == b.Spec &&
			a.LastTickAt.Equal(b.LastTickAt) && a.LastOutcome == b.LastOutcome &&
			a.LastJobID == b.LastJobID && a.NextAt.Equal(b.NextAt) && a.UpdatedAt.Equal(b.UpdatedAt)
	}) {
		t.Fatalf("%s: ScheduleList =\n%s\nwant\n%s", what, fmtSchedules(got), fmtSchedules(want))
	}
	for _, s := range got {
		for field, at := range map[string]time.Time{"LastTickAt": s.LastTickAt, "NextAt": s.NextAt, "UpdatedAt": s.UpdatedAt} {
			if at.Location() != time.UTC {
				t.Errorf("%s: schedule %s: %s is in %s, want UTC", what, s.Name, field, at.Location())
			}
		}
	}
}

func fmtSchedules(ss []twicetype.Schedule) string {
	var b strings.Builder
	for _, s := range ss {
		fmt.Fprintf(&b, "  %q kind=%q spec=%q last=%s outcome=%q job=%d next=%s updated=%s\n",
			s.Name, s.Kind, s.Spec, s.LastTickAt, s.LastOutcome, s.LastJobID, s.NextAt, s.UpdatedAt)
	}
	if b.Len() == 0 {
		return "  (none)\n"
	}
	return b.String()
}

// wantTickJob is the row JobInsertMany stores for the job of p.
func wantTickJob(p *twicestore.ScheduleTickParams, id int64) *twicetype.JobRow {
	j := p.Job
	return &twicetype.JobRow{
		ID: id, Kind: j.Kind, Queue: j.Queue, Priority: j.Priority, Args: j.Args,
		MessageID: j.MessageID, Key: j.Key, CorrelationID: j.CorrelationID, UniqueKey: j.UniqueKey,
		State: twicetype.JobStateAvailable, MaxAttempts: j.MaxAttempts,
		RunAt: j.RunAt, CreatedAt: j.CreatedAt,
	}
}

func testScheduleFirst(t *testing.T, e *env) {
	p := e.tickParams("storetest.nightly", e.base)
	p.Job.Queue = "reports"
	p.Job.Priority = 2
	p.Job.Args = argsBytes
	p.Job.UniqueKey = "storetest.nightly@" + e.base.Format(time.RFC3339Nano)
	p.Job.MaxAttempts = 5
	p.Job.RunAt = e.at(time.Second)
	res := e.tickFires(e.s, p)
	if res.Job == nil || res.Job.ID <= 0 {
		t.Fatalf("a fired tick with a job returned job %+v, want the inserted job", res.Job)
	}
	want := wantTickJob(p, res.Job.ID)
	checkJob(t, "returned job", res.Job, want)
	checkJob(t, "JobGet", e.get(res.Job.ID), want)
	checkSchedules(t, "after the first tick", e.schedules(e.s), []twicetype.Schedule{recorded(p, res.Job.ID)})
}

func testScheduleSameTick(t *testing.T, e *env) {
	first := e.tickParams("storetest.same", e.base)
	res := e.tickFires(e.s, first)
	// The same tick again, as another node's scheduler would send it:
	// another job, another spec, a later Now. None of it is recorded.
	again := e.tickParams("storetest.same", e.base)
	again.Spec = "@every 2m"
	again.Now = e.at(time.Hour)
	e.tickHeld(e.s, again)
	e.tickHeld(e.s, e.skippedParams("storetest.same", e.base))
	if jobs := e.scheduleJobs(); len(jobs) != 1 || jobs[0].ID != res.Job.ID {
		t.Fatalf("jobs after ticking the same tick three times = %v, want only job %d", ids(jobs), res.Job.ID)
	}
	checkSchedules(t, "after the same tick again", e.schedules(e.s), []twicetype.Schedule{recorded(first, res.Job.ID)})
}

func testScheduleEarlierTick(t *testing.T, e *env) {
	later := e.tickParams("storetest.earlier", e.at(time.Hour))
	res := e.tickFires(e.s, later)
	// A scheduler whose clock is behind, or that was paused, catches up
	// with ticks another one already passed.
	for _, d := range []time.Duration{time.Hour - time.Microsecond, time.Minute, -time.Hour} {
		e.tickHeld(e.s, e.tickParams("storetest.earlier", e.at(d)))
	}
	if jobs := e.scheduleJobs(); len(jobs) != 1 {
		t.Fatalf("jobs after earlier ticks = %v, want only job %d", ids(jobs), res.Job.ID)
	}
	checkSchedules(t, "after earlier ticks", e.schedules(e.s), []twicetype.Schedule{recorded(later, res.Job.ID)})
}

func testScheduleLaterTick(t *testing.T, e *env) {
	first := e.tickFires(e.s, e.tickParams("storetest.later", e.base))
	// One microsecond is a later tick: the precision both drivers keep.
	next := e.tickParams("storetest.later", e.at(time.Microsecond))
	next.Spec = "@every 1us" // a later tick records the spec it was computed from
	res := e.tickFires(e.s, next)
	if res.Job == nil || res.Job.ID == first.Job.ID {
		t.Fatalf("the later tick returned job %+v, want a new job (the first was %d)", res.Job, first.Job.ID)
	}
	checkJob(t, "later tick's job", res.Job, wantTickJob(next, res.Job.ID))
	if got := ids(e.scheduleJobs()); !slices.Equal(sorted(got), sorted([]int64{first.Job.ID, res.Job.ID})) {
		t.Fatalf("jobs after two ticks = %v, want %d and %d", got, first.Job.ID, res.Job.ID)
	}
	checkSchedules(t, "after the later tick", e.schedules(e.s), []twicetype.Schedule{recorded(next, res.Job.ID)})
}

func testScheduleSkipped(t *testing.T, e *env) {
	const name = "storetest.skipped"
	enqueued := e.tickFires(e.s, e.tickParams(name, e.base))

	skipped := e.skippedParams(name, e.at(time.Minute))
	if res := e.tickFires(e.s, skipped); res.Job != nil {
		t.Fatalf("a skipped tick returned job %d, want none", res.Job.ID)
	}
	checkSchedules(t, "after a skipped tick", e.schedules(e.s), []twicetype.Schedule{recorded(skipped, 0)})
	if jobs := e.scheduleJobs(); len(jobs) != 1 || jobs[0].ID != enqueued.Job.ID {
		t.Fatalf("jobs after a skipped tick = %v, want only job %d", ids(jobs), enqueued.Job.ID)
	}
	// The skipped tick is taken like any other: it does not fire again,
	// with or without a job.
	e.tickHeld(e.s, e.tickParams(name, e.at(time.Minute)))
	e.tickHeld(e.s, e.skippedParams(name, e.at(time.Minute)))

	next := e.tickParams(name, e.at(2*time.Minute))
	res := e.tickFires(e.s, next)
	if res.Job == nil {
		t.Fatal("the enqueued tick after a skipped one returned no job")
	}
	checkSchedules(t, "after the enqueued tick", e.schedules(e.s), []twicetype.Schedule{recorded(next, res.Job.ID)})
	if jobs := e.scheduleJobs(); len(jobs) != 2 {
		t.Fatalf("jobs after enqueued, skipped, enqueued = %v, want 2", ids(jobs))
	}
}

func testScheduleConcurrent(t *testing.T, e *env) {
	const name, nodes = "storetest.race", 8
	// Every node's scheduler computes the same tick and its own job.
	ps := make([]*twicestore.ScheduleTickParams, nodes)
	for i := range ps {
		ps[i] = e.tickParams(name, e.base)
	}
	results := make([]*twicestore.ScheduleTickResult, nodes)
	errs := make([]error, nodes)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() { results[i], errs[i] = e.s.ScheduleTick(e.ctx, ps[i]) })
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		if err != nil {
			t.Fatalf("ScheduleTick of node %d: %v", i, err)
		}
		if results[i].Fired {
			if winner >= 0 {
				t.Fatalf("nodes %d and %d both fired the tick", winner, i)
			}
			winner = i
		} else if results[i].Job != nil {
			t.Errorf("node %d did not fire, yet returned job %d", i, results[i].Job.ID)
		}
	}
	if winner < 0 {
		t.Fatal("no node fired the tick")
	}
	jobs := e.scheduleJobs()
	if len(jobs) != 1 || results[winner].Job == nil || jobs[0].ID != results[winner].Job.ID {
		t.Fatalf("jobs after %d concurrent ticks = %v, want only the winner's", nodes, ids(jobs))
	}
	checkJob(t, "the winner's job", jobs[0], wantTickJob(ps[winner], jobs[0].ID))
	checkSchedules(t, "after concurrent ticks", e.schedules(e.s), []twicetype.Schedule{recorded(ps[winner], jobs[0].ID)})
}

// testScheduleUniqueHeld pins what a fired tick does when its job's unique
// key is held by an unfinished job (the previous tick's job, still running):
// the tick is recorded, no job is inserted, and the holder is returned and
// recorded as the tick's job, as JobInsertMany reports a duplicate.
func testScheduleUniqueHeld(t *testing.T, e *env) {
	const name = "storetest.held"
	first := e.tickParams(name, e.base)
	first.Job.UniqueKey = name
	holder := e.tickFires(e.s, first).Job

	next := e.tickParams(name, e.at(time.Minute))
	next.Job.UniqueKey = name
	res := e.tickFires(e.s, next)
	if res.Job == nil || res.Job.ID != holder.ID {
		t.Fatalf("a tick whose unique key is held returned job %+v, want the holder %d", res.Job, holder.ID)
	}
	if jobs := e.scheduleJobs(); len(jobs) != 1 {
		t.Fatalf("jobs = %v, want only the holder %d", ids(jobs), holder.ID)
	}
	checkSchedules(t, "after the held tick", e.schedules(e.s), []twicetype.Schedule{recorded(next, holder.ID)})
}

func testScheduleTx(t *testing.T, e *env) {
	const name = "storetest.tx"
	// Rolled back: neither the tick nor its job is left.
	tx := e.begin()
	p := e.tickParams(name, e.base)
	res := e.tickFires(tx, p)
	if res.Job == nil {
		t.Fatal("a tick inside a transaction returned no job")
	}
	checkSchedules(t, "inside the transaction", e.schedules(tx), []twicetype.Schedule{recorded(p, res.Job.ID)})
	checkSchedules(t, "outside the open transaction", e.schedules(e.s), nil)
	e.checkNotFound("outside the open transaction", res.Job.ID)
	if err := tx.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	checkSchedules(t, "after rollback", e.schedules(e.s), nil)
	e.checkNotFound("after rollback", res.Job.ID)
	if jobs := e.scheduleJobs(); len(jobs) != 0 {
		t.Fatalf("jobs after rollback = %v, want none", ids(jobs))
	}

	// The rolled-back tick was not taken: it fires again, and commits with
	// its job.
	tx = e.begin()
	p = e.tickParams(name, e.base)
	res = e.tickFires(tx, p)
	checkSchedules(t, "outside before commit", e.schedules(e.s), nil)
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	checkSchedules(t, "after commit", e.schedules(e.s), []twicetype.Schedule{recorded(p, res.Job.ID)})
	checkJob(t, "committed job", e.get(res.Job.ID), wantTickJob(p, res.Job.ID))
	e.tickHeld(e.s, e.tickParams(name, e.base))
}

func testScheduleOrder(t *testing.T, e *env) {
	// Ordered by the name's bytes, whatever the database's collation (see
	// testToggleOrder).
	names := []string{"storetest.z", "storetest.ab", "storetest.a-c", "storetest.B", "storetest.a"}
	var want []twicetype.Schedule
	for i, name := range names {
		p := e.tickParams(name, e.at(time.Duration(i)*time.Second))
		if i%2 == 1 {
			p = e.skippedParams(name, p.TickAt)
		}
		res := e.tickFires(e.s, p)
		var id int64
		if res.Job != nil {
			id = res.Job.ID
		}
		want = append(want, recorded(p, id))
	}
	slices.SortFunc(want, func(a, b twicetype.Schedule) int { return strings.Compare(a.Name, b.Name) })
	checkSchedules(t, "ordering", e.schedules(e.s), want)
}

func testScheduleZeroTimes(t *testing.T, e *env) {
	p := e.tickParams("storetest.now", e.base)
	p.Now, p.NextAt = time.Time{}, time.Time{} // a spec with no tick after this one
	before := time.Now().Add(-time.Second)
	e.tickFires(e.s, p)
	after := time.Now().Add(time.Second)
	got := e.schedules(e.s)
	if len(got) != 1 {
		t.Fatalf("ScheduleList = %d schedules, want 1", len(got))
	}
	if at := got[0].UpdatedAt; at.Before(before) || at.After(after) {
		t.Fatalf("a tick with a zero Now has UpdatedAt = %s, want the time of the tick (%s to %s)", at, before, after)
	}
	if !got[0].NextAt.IsZero() {
		t.Fatalf("a tick with a zero NextAt has NextAt = %s, want the zero time", got[0].NextAt)
	}
}

func testScheduleInvalid(t *testing.T, e *env) {
	for _, tc := range []struct {
		name   string
		change func(p *twicestore.ScheduleTickParams)
	}{
		{"no name", func(p *twicestore.ScheduleTickParams) { p.Name = "" }},
		{"zero TickAt", func(p *twicestore.ScheduleTickParams) { p.TickAt = time.Time{} }},
		{"unknown outcome", func(p *twicestore.ScheduleTickParams) { p.Outcome = "ran" }},
		{"skipped with a job", func(p *twicestore.ScheduleTickParams) { p.Outcome = twicetype.ScheduleSkipped }},
	} {
		p := e.tickParams("storetest.invalid", e.base)
		tc.change(p)
		if res, err := e.s.ScheduleTick(e.ctx, p); err == nil {
			t.Errorf("ScheduleTick with %s: result %+v, want an error", tc.name, res)
		}
	}
	checkSchedules(t, "after invalid ticks", e.schedules(e.s), nil)
	if jobs := e.scheduleJobs(); len(jobs) != 0 {
		t.Fatalf("jobs after invalid ticks = %v, want none", ids(jobs))
	}
}

func testScheduleEmpty(t *testing.T, e *env) {
	got := e.schedules(e.s)
	if got == nil || len(got) != 0 {
		t.Fatalf("ScheduleList on a new store = %#v, want an empty, non-nil list", got)
	}
}

func (e *env) removeSchedule(ex twicestore.Executor, name string) error {
	return ex.ScheduleRemove(e.ctx, &twicestore.ScheduleRemoveParams{Name: name})
}

func testScheduleRemove(t *testing.T, e *env) {
	const gone, kept = "storetest.gone", "storetest.kept"
	for i := range 3 {
		e.tickFires(e.s, e.tickParams(gone, e.at(time.Duration(i)*time.Minute)))
	}
	keep := e.tickParams(kept, e.base)
	keepRes := e.tickFires(e.s, keep)

	if err := e.removeSchedule(e.s, gone); err != nil {
		t.Fatalf("ScheduleRemove(%s): %v", gone, err)
	}
	checkSchedules(t, "after the remove", e.schedules(e.s), []twicetype.Schedule{recorded(keep, keepRes.Job.ID)})
	if ticks := e.ticks(gone, 0); len(ticks) != 0 {
		t.Fatalf("the removed schedule still has %d ticks", len(ticks))
	}
	if ticks := e.ticks(kept, 0); len(ticks) != 1 {
		t.Fatalf("the kept schedule has %d ticks, want 1", len(ticks))
	}
	// The jobs its ticks enqueued are left alone.
	if jobs := e.scheduleJobs(); len(jobs) != 4 {
		t.Fatalf("after the remove there are %d jobs of the schedules, want the 4 the ticks enqueued", len(jobs))
	}
	if err := e.removeSchedule(e.s, gone); !errors.Is(err, twicestore.ErrNotFound) {
		t.Fatalf("ScheduleRemove of a removed schedule = %v, want ErrNotFound", err)
	}

	// A scheduler still running the schedule records it afresh: even an
	// earlier tick than the last one removed fires.
	again := e.tickParams(gone, e.base)
	res := e.tickFires(e.s, again)
	checkSchedules(t, "after the schedule ticked again", e.schedules(e.s), []twicetype.Schedule{
		recorded(again, res.Job.ID), recorded(keep, keepRes.Job.ID),
	})
	if ticks := e.ticks(gone, 0); len(ticks) != 1 || !ticks[0].TickAt.Equal(again.TickAt) {
		t.Fatalf("after ticking again the schedule has ticks %+v, want only %s", ticks, again.TickAt)
	}
}

func testScheduleRemoveUnknown(t *testing.T, e *env) {
	for _, name := range []string{"storetest.never", ""} {
		err := e.removeSchedule(e.s, name)
		if !errors.Is(err, twicestore.ErrNotFound) {
			t.Errorf("ScheduleRemove(%q) = %v, want ErrNotFound", name, err)
		}
		if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("%q", name)) {
			t.Errorf("ScheduleRemove(%q) = %q, want the error to name the schedule", name, err)
		}
	}
}

func testScheduleRemoveTx(t *testing.T, e *env) {
	const name = "storetest.txremove"
	p := e.tickParams(name, e.base)
	res := e.tickFires(e.s, p)

	tx := e.begin()
	if err := e.removeSchedule(tx, name); err != nil {
		t.Fatalf("ScheduleRemove in a transaction: %v", err)
	}
	checkSchedules(t, "inside the transaction", e.schedules(tx), nil)
	if err := tx.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	checkSchedules(t, "after rollback", e.schedules(e.s), []twicetype.Schedule{recorded(p, res.Job.ID)})
	if ticks := e.ticks(name, 0); len(ticks) != 1 {
		t.Fatalf("after rollback the schedule has %d ticks, want 1", len(ticks))
	}

	tx = e.begin()
	if err := e.removeSchedule(tx, name); err != nil {
		t.Fatalf("ScheduleRemove in a transaction: %v", err)
	}
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	checkSchedules(t, "after commit", e.schedules(e.s), nil)
	if ticks := e.ticks(name, 0); len(ticks) != 0 {
		t.Fatalf("after commit the schedule has %d ticks, want none", len(ticks))
	}
}
