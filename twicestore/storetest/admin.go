package storetest

import (
	"cmp"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

var adminTests = []test{
	{"GetNotFound", testGetNotFound},
	{"ListFilters", testListFilters},
	{"ListPagination", testListPagination},
	{"CountGrouping", testCount},
	{"RetryDeadByIDs", testRetryByIDs},
	{"RetryDeadByFilter", testRetryByFilter},
	{"Discard", testDiscard},
	{"DeleteFinished", testDeleteFinished},
	{"DeleteFinishedLooksAtTheOldestOnly", testDeleteFinishedWindow},
	{"DeleteFinishedGoesOnFromItsCursor", testDeleteFinishedCursor},
	{"RunNow", testRunNow},
	{"ListByCorrelationAndMetadata", testListByCorrelationAndMetadata},
	{"BulkByCorrelationAndMetadata", testBulkByCorrelationAndMetadata},
}

func testGetNotFound(t *testing.T, e *env) {
	_, err := e.s.JobGet(e.ctx, &twicestore.JobGetParams{ID: 1 << 40})
	if !errors.Is(err, twicestore.ErrNotFound) {
		t.Fatalf("JobGet of a missing id: error = %v, want ErrNotFound", err)
	}
}

func (e *env) list(p *twicestore.JobListParams) []int64 {
	e.t.Helper()
	res, err := e.s.JobList(e.ctx, p)
	if err != nil {
		e.t.Fatalf("JobList: %v", err)
	}
	return ids(res.Jobs)
}

// descending returns the ids newest first, as listings return them.
func descending(ids ...int64) []int64 {
	s := sorted(ids)
	slices.Reverse(s)
	return s
}

// mixedJobs stores jobs in several states, kinds and queues:
// available (k1, default), available (k2, q2), running (k1), completed (k2),
// dead (k1).
func (e *env) mixedJobs() (avail1, avail2, running, completed, dead int64) {
	const k1, k2 = "storetest.list1.v1", "storetest.list2.v1"
	p := e.job(k2)
	p.Queue = "q2"
	// One insert each, so the ids follow this order whatever the driver.
	var res []*twicestore.JobInsertResult
	for _, p := range []*twicestore.JobInsertParams{e.job(k1), p, e.job(k1), e.job(k2), e.job(k1)} {
		res = append(res, e.insert(p)...)
	}
	// Fetch the ones to move out of available explicitly by id order.
	jobs := e.fetch(e.base, 3, "node-a", k1, k2) // three of the four in "default"
	byID := map[int64]*twicetype.JobRow{}
	for _, j := range jobs {
		byID[j.ID] = j
	}
	avail1, avail2 = res[0].Job.ID, res[1].Job.ID
	running, completed, dead = res[2].Job.ID, res[3].Job.ID, res[4].Job.ID
	// res[0] has the smallest id of the "default" jobs, so it is fetched too;
	// put it back to available, then finish the others.
	if byID[avail1] == nil || byID[running] == nil || byID[completed] == nil {
		e.t.Fatalf("unexpected fetch: %v", ids(jobs))
	}
	at := e.at(time.Second)
	e.finish(
		&twicestore.JobOutcome{ID: avail1, Epoch: 1, State: twicetype.JobStateAvailable, RunAt: at, RefundAttempt: true},
		&twicestore.JobOutcome{ID: completed, Epoch: 1, State: twicetype.JobStateCompleted, FinishedAt: at},
	)
	d := e.fetchOne(at, k1) // avail1 is due at base+1s, dead's job at base: dead's comes first
	if d.ID != dead {
		e.t.Fatalf("fetched %d, want %d", d.ID, dead)
	}
	e.finish(&twicestore.JobOutcome{ID: dead, Epoch: d.Epoch, State: twicetype.JobStateDead, FinishedAt: at,
		Error: &twicetype.AttemptError{Attempt: 1, At: at, Error: "boom"}})
	return avail1, avail2, running, completed, dead
}

func testListFilters(t *testing.T, e *env) {
	a1, a2, run, done, dead := e.mixedJobs()
	for _, tc := range []struct {
		name   string
		filter twicestore.JobFilter
		want   []int64
	}{
		{"all", twicestore.JobFilter{}, descending(a1, a2, run, done, dead)},
		{"available", twicestore.JobFilter{State: twicetype.JobStateAvailable}, descending(a1, a2)},
		{"running", twicestore.JobFilter{State: twicetype.JobStateRunning}, descending(run)},
		{"completed", twicestore.JobFilter{State: twicetype.JobStateCompleted}, descending(done)},
		{"dead", twicestore.JobFilter{State: twicetype.JobStateDead}, descending(dead)},
		{"discarded", twicestore.JobFilter{State: twicetype.JobStateDiscarded}, nil},
		{"kind", twicestore.JobFilter{Kind: "storetest.list1.v1"}, descending(a1, run, dead)},
		{"queue", twicestore.JobFilter{Queue: "q2"}, descending(a2)},
		{"kind and state", twicestore.JobFilter{Kind: "storetest.list1.v1", State: twicetype.JobStateAvailable}, descending(a1)},
		{"ids", twicestore.JobFilter{IDs: []int64{dead, a2, 1 << 40}}, descending(a2, dead)},
		{"ids and state", twicestore.JobFilter{IDs: []int64{dead, a2}, State: twicetype.JobStateDead}, descending(dead)},
		{"no match", twicestore.JobFilter{Kind: "storetest.none.v1"}, nil},
	} {
		got := e.list(&twicestore.JobListParams{Filter: tc.filter})
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: JobList = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func testListPagination(t *testing.T, e *env) {
	const kind = "storetest.page.v1"
	var ps []*twicestore.JobInsertParams
	for range 25 {
		ps = append(ps, e.job(kind))
	}
	var all []int64
	for _, r := range e.insert(ps...) {
		all = append(all, r.Job.ID)
	}
	e.insertOne(e.job("storetest.other.v1")) // filtered out

	var pages [][]int64
	var before int64
	for {
		page := e.list(&twicestore.JobListParams{Filter: twicestore.JobFilter{Kind: kind}, BeforeID: before, Limit: 10})
		if len(page) == 0 {
			break
		}
		pages = append(pages, page)
		before = page[len(page)-1]
		if len(pages) > 5 {
			t.Fatal("pagination does not end")
		}
	}
	if len(pages) != 3 || len(pages[0]) != 10 || len(pages[1]) != 10 || len(pages[2]) != 5 {
		t.Fatalf("pages = %v, want 10, 10 and 5 ids", pages)
	}
	if got, want := slices.Concat(pages...), descending(all...); !slices.Equal(got, want) {
		t.Fatalf("pages together = %v, want %v", got, want)
	}
}

func testCount(t *testing.T, e *env) {
	e.mixedJobs()
	want := []twicestore.JobCount{
		{State: twicetype.JobStateAvailable, Queue: "default", Kind: "storetest.list1.v1", Count: 1},
		{State: twicetype.JobStateAvailable, Queue: "q2", Kind: "storetest.list2.v1", Count: 1},
		{State: twicetype.JobStateCompleted, Queue: "default", Kind: "storetest.list2.v1", Count: 1},
		{State: twicetype.JobStateDead, Queue: "default", Kind: "storetest.list1.v1", Count: 1},
		{State: twicetype.JobStateRunning, Queue: "default", Kind: "storetest.list1.v1", Count: 1},
	}
	// Add a second job to one group, so a count above one is checked too.
	e.insertOne(e.job("storetest.list1.v1"))
	want[0].Count = 2
	res, err := e.s.JobCount(e.ctx, &twicestore.JobCountParams{})
	if err != nil {
		t.Fatal(err)
	}
	if got := sortCounts(res.Counts); !slices.Equal(got, want) {
		t.Fatalf("JobCount = %+v,\nwant %+v", got, want)
	}
	res, err = e.s.JobCount(e.ctx, &twicestore.JobCountParams{Filter: twicestore.JobFilter{Kind: "storetest.list2.v1"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := sortCounts(res.Counts); !slices.Equal(got, []twicestore.JobCount{want[1], want[2]}) {
		t.Fatalf("JobCount by kind = %+v", got)
	}
}

func sortCounts(c []twicestore.JobCount) []twicestore.JobCount {
	c = slices.Clone(c)
	slices.SortFunc(c, func(a, b twicestore.JobCount) int {
		return cmp.Or(cmp.Compare(a.State, b.State), cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.Kind, b.Kind))
	})
	return c
}

func (e *env) bulk(action func(*twicestore.JobBulkParams) (*twicestore.JobBulkResult, error), p *twicestore.JobBulkParams) []int64 {
	e.t.Helper()
	res, err := action(p)
	if err != nil {
		e.t.Fatalf("bulk action: %v", err)
	}
	return sorted(res.IDs)
}

func (e *env) retry(p *twicestore.JobBulkParams) []int64 {
	e.t.Helper()
	return e.bulk(func(p *twicestore.JobBulkParams) (*twicestore.JobBulkResult, error) { return e.s.JobRetry(e.ctx, p) }, p)
}

func (e *env) discard(p *twicestore.JobBulkParams) []int64 {
	e.t.Helper()
	return e.bulk(func(p *twicestore.JobBulkParams) (*twicestore.JobBulkResult, error) { return e.s.JobDiscard(e.ctx, p) }, p)
}

func testRetryByIDs(t *testing.T, e *env) {
	const kind = "storetest.retryids.v1"
	e.insert(e.job(kind), e.job(kind), e.job(kind))
	d1 := e.kill(kind, e.base)
	d2 := e.kill(kind, e.base)
	avail := e.list(&twicestore.JobListParams{Filter: twicestore.JobFilter{State: twicetype.JobStateAvailable}})[0]
	before := e.get(avail)

	now := e.at(time.Hour)
	got := e.retry(&twicestore.JobBulkParams{Filter: twicestore.JobFilter{IDs: []int64{d1.ID, avail}}, Now: now})
	if !slices.Equal(got, []int64{d1.ID}) {
		t.Fatalf("JobRetry = %v, want [%d]", got, d1.ID)
	}
	want := *d1
	want.State = twicetype.JobStateAvailable
	want.Attempt = 0
	want.RunAt = now
	want.FinishedAt = time.Time{}
	checkJob(t, "retried job", e.get(d1.ID), &want)
	checkJob(t, "job not asked for", e.get(d2.ID), d2)
	checkJob(t, "available job asked for", e.get(avail), before)

	// Fencing keeps working across a retry: the next lease has a new epoch.
	var again *twicetype.JobRow
	for _, j := range e.fetch(now, 10, "node-a", kind) {
		if j.ID == d1.ID {
			again = j
		}
	}
	if again == nil || again.Epoch <= d1.Epoch || again.Attempt != 1 {
		t.Fatalf("refetch after retry = %+v; want epoch above %d, attempt 1", again, d1.Epoch)
	}
}

func testRetryByFilter(t *testing.T, e *env) {
	const k1, k2 = "storetest.retryf1.v1", "storetest.retryf2.v1"
	e.insert(e.job(k1), e.job(k1), e.job(k2), e.job(k1))
	a := e.kill(k1, e.base)
	b := e.kill(k1, e.base)
	other := e.kill(k2, e.base)
	running := e.fetchOne(e.base, k1)

	got := e.retry(&twicestore.JobBulkParams{Filter: twicestore.JobFilter{Kind: k1}, Now: e.at(time.Minute)})
	if want := sorted([]int64{a.ID, b.ID}); !slices.Equal(got, want) {
		t.Fatalf("JobRetry by kind = %v, want %v", got, want)
	}
	checkJob(t, "dead job of another kind", e.get(other.ID), other)
	checkJob(t, "running job of the kind", e.get(running.ID), running)
	if got := e.retry(&twicestore.JobBulkParams{Filter: twicestore.JobFilter{Kind: k1}, Now: e.at(time.Minute)}); len(got) != 0 {
		t.Fatalf("second JobRetry changed %v", got)
	}
	if got := e.retry(&twicestore.JobBulkParams{Now: e.at(time.Minute)}); !slices.Equal(got, []int64{other.ID}) {
		t.Fatalf("JobRetry with no filter = %v, want every dead job [%d]", got, other.ID)
	}
}

func testDiscard(t *testing.T, e *env) {
	const kind = "storetest.discard.v1"
	e.insert(e.job(kind), e.job(kind))
	dead := e.kill(kind, e.base)
	running := e.fetchOne(e.base, kind)

	now := e.at(time.Hour)
	got := e.discard(&twicestore.JobBulkParams{Filter: twicestore.JobFilter{IDs: []int64{dead.ID, running.ID}}, Now: now})
	if !slices.Equal(got, []int64{dead.ID}) {
		t.Fatalf("JobDiscard = %v, want [%d]", got, dead.ID)
	}
	want := *dead
	want.State = twicetype.JobStateDiscarded
	want.FinishedAt = now
	checkJob(t, "discarded job", e.get(dead.ID), &want)
	checkJob(t, "running job", e.get(running.ID), running)
	if got := e.discard(&twicestore.JobBulkParams{Filter: twicestore.JobFilter{IDs: []int64{dead.ID}}, Now: now}); len(got) != 0 {
		t.Fatalf("discarding again changed %v", got)
	}

	// A discarded job can still be retried.
	if got := e.retry(&twicestore.JobBulkParams{Filter: twicestore.JobFilter{State: twicetype.JobStateDiscarded}, Now: now}); !slices.Equal(got, []int64{dead.ID}) {
		t.Fatalf("JobRetry of a discarded job = %v, want [%d]", got, dead.ID)
	}
	if got := e.get(dead.ID); got.State != twicetype.JobStateAvailable || len(got.Errors) != 1 {
		t.Fatalf("retried discarded job: state %s, %d errors; want available with its error kept", got.State, len(got.Errors))
	}
}

// testDeleteFinishedWindow: a batch looks at no more than
// DeleteFinishedWindow(Limit) of a state's oldest rows, so a round that
// finds nothing old enough stays cheap however long the history is. A row
// due for deletion behind a longer run of younger ones waits.
func testDeleteFinishedWindow(t *testing.T, e *env) {
	const kind = "storetest.window.v1"
	window := driverkit.DeleteFinishedWindow(1)
	for range window { // the oldest ids, finished recently (a late finish)
		e.insertOne(e.job(kind))
		e.complete(e.fetchOne(e.at(0), kind), e.at(-time.Minute))
	}
	e.insertOne(e.job(kind))
	old := e.fetchOne(e.at(0), kind)
	e.complete(old, e.at(-3*time.Hour))
	del := func(limit int) int {
		t.Helper()
		res, err := e.s.JobDeleteFinished(e.ctx, &twicestore.JobDeleteFinishedParams{CompletedBefore: e.at(-time.Hour), Limit: limit})
		if err != nil {
			t.Fatalf("JobDeleteFinished: %v", err)
		}
		return res.Deleted
	}
	if n := del(1); n != 0 {
		t.Fatalf("Limit 1 deleted %d: it looked past the %d oldest completed jobs", n, window)
	}
	e.get(old.ID)
	if n := del(2); n != 1 { // a window of 20 reaches it
		t.Fatalf("Limit 2 deleted %d, want the old job", n)
	}
	if _, err := e.s.JobGet(e.ctx, &twicestore.JobGetParams{ID: old.ID}); !errors.Is(err, twicestore.ErrNotFound) {
		t.Fatalf("old job not deleted: %v", err)
	}
}

// testDeleteFinishedCursor: a batch given the pass's cursor (the After of
// the batch before) looks at no job at or below it, so a job that finished
// late with a lower id waits for the next pass, which starts at the front.
func testDeleteFinishedCursor(t *testing.T, e *env) {
	const kind = "storetest.cursor.v1"
	e.insertOne(e.job(kind))
	late := e.fetchOne(e.at(0), kind) // the lowest id, still running
	var done []*twicetype.JobRow
	for range 3 {
		e.insertOne(e.job(kind))
		j := e.fetchOne(e.at(0), kind)
		e.complete(j, e.at(-3*time.Hour))
		done = append(done, j)
	}
	cut := e.at(-time.Hour)
	del := func(after map[twicetype.JobState]int64) *twicestore.JobDeleteFinishedResult {
		t.Helper()
		res, err := e.s.JobDeleteFinished(e.ctx, &twicestore.JobDeleteFinishedParams{
			CompletedBefore: cut, DeadBefore: cut, Limit: 2, After: after})
		if err != nil {
			t.Fatalf("JobDeleteFinished: %v", err)
		}
		return res
	}
	first := del(nil)
	if first.Deleted != 2 || len(first.After) != 1 || first.After[twicetype.JobStateCompleted] != done[1].ID {
		t.Fatalf("first batch = %+v, want 2 deleted and the cursor at job %d, the higher of them", first, done[1].ID)
	}
	e.complete(late, e.at(-3*time.Hour)) // finished after the pass began, below its cursor
	second := del(first.After)
	if second.Deleted != 1 || second.After[twicetype.JobStateCompleted] != done[2].ID {
		t.Fatalf("second batch = %+v, want job %d alone deleted and the cursor on it", second, done[2].ID)
	}
	e.get(late.ID)
	if third := del(second.After); third.Deleted != 0 || third.After[twicetype.JobStateCompleted] != done[2].ID {
		t.Fatalf("third batch = %+v, want nothing deleted and the cursor kept", third)
	}
	if next := del(nil); next.Deleted != 1 { // the next pass
		t.Fatalf("a new pass deleted %d, want the job that finished late", next.Deleted)
	}
	if _, err := e.s.JobGet(e.ctx, &twicestore.JobGetParams{ID: late.ID}); !errors.Is(err, twicestore.ErrNotFound) {
		t.Fatalf("the late job not deleted by the next pass: %v", err)
	}
}

func testDeleteFinished(t *testing.T, e *env) {
	const kind = "storetest.retention.v1"
	// Three completed jobs finished an hour apart, one dead, one discarded,
	// one still available and one running: only old finished ones may go.
	var completed []*twicetype.JobRow
	for i := range 3 {
		e.insertOne(e.job(kind))
		j := e.fetchOne(e.at(0), kind)
		e.complete(j, e.at(time.Duration(i-3)*time.Hour)) // -3h, -2h, -1h
		completed = append(completed, j)
	}
	deadAt := func() *twicetype.JobRow {
		e.insertOne(e.job(kind))
		j := e.fetchOne(e.at(0), kind)
		if applied := e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateDead,
			FinishedAt: e.at(-3 * time.Hour), Error: &twicetype.AttemptError{Attempt: 1, At: e.at(0), Error: "boom"}}); !applied[0] {
			t.Fatal("dead-lettering not applied")
		}
		return j
	}
	dead := deadAt()
	discarded := deadAt()
	if ids := e.discard(&twicestore.JobBulkParams{Filter: twicestore.JobFilter{IDs: []int64{discarded.ID}}, Now: e.at(-3 * time.Hour)}); len(ids) != 1 {
		t.Fatalf("discard = %v", ids)
	}
	e.insertOne(e.job(kind))
	running := e.fetchOne(e.at(0), kind)
	available := e.insertOne(e.job(kind))
	del := func(p *twicestore.JobDeleteFinishedParams) int {
		t.Helper()
		res, err := e.s.JobDeleteFinished(e.ctx, p)
		if err != nil {
			t.Fatalf("JobDeleteFinished: %v", err)
		}
		return res.Deleted
	}
	cut := e.at(-90 * time.Minute)
	if n := del(&twicestore.JobDeleteFinishedParams{CompletedBefore: cut, Limit: 1}); n != 1 {
		t.Fatalf("Limit 1 deleted %d", n)
	}
	if _, err := e.s.JobGet(e.ctx, &twicestore.JobGetParams{ID: completed[0].ID}); !errors.Is(err, twicestore.ErrNotFound) {
		t.Fatalf("oldest completed job not deleted first: %v", err)
	}
	if n := del(&twicestore.JobDeleteFinishedParams{CompletedBefore: cut, Limit: 10}); n != 1 {
		t.Fatalf("second pass deleted %d, want the one other completed job older than the cut-off", n)
	}
	e.get(completed[2].ID) // finished after the cut-off: kept
	e.get(dead.ID)         // no dead cut-off: kept
	if n := del(&twicestore.JobDeleteFinishedParams{DeadBefore: cut, DiscardedBefore: cut}); n != 0 {
		t.Fatalf("a zero Limit deleted %d", n)
	}
	if n := del(&twicestore.JobDeleteFinishedParams{DeadBefore: cut, DiscardedBefore: cut, Limit: 10}); n != 2 {
		t.Fatalf("dead and discarded pass deleted %d, want 2", n)
	}
	if n := del(&twicestore.JobDeleteFinishedParams{
		CompletedBefore: e.at(time.Hour), DeadBefore: e.at(time.Hour), DiscardedBefore: e.at(time.Hour), Limit: 10}); n != 1 {
		t.Fatalf("final pass deleted %d, want only the last completed job", n)
	}
	if e.get(available.ID).State != twicetype.JobStateAvailable || e.get(running.ID).State != twicetype.JobStateRunning {
		t.Fatal("an unfinished job was touched")
	}
}

// testRunNow: a scheduled job and a retry waiting out its backoff become
// due at Now and are fetched then; a job already due keeps its run time;
// running, finished and waiting jobs are left alone as the wrong state.
func testRunNow(t *testing.T, e *env) {
	const kind = "storetest.runnow.v1"
	later := e.job(kind)
	later.RunAt = e.at(time.Hour)
	scheduled := e.insertOne(later).ID
	due := e.insertOne(e.job(kind)).ID
	retry := e.insertOne(e.job(kind)).ID
	running := e.insertOne(e.job(kind)).ID
	for _, j := range e.fetch(e.base, 3, "node-a", kind) { // due, retry, running
		switch j.ID {
		case retry: // fails, and waits out a backoff of an hour
			e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateAvailable, RunAt: e.at(time.Hour),
				Error: &twicetype.AttemptError{Attempt: 1, At: e.base, Error: "boom"}})
		case due:
			e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateAvailable, RunAt: e.base, RefundAttempt: true})
		}
	}
	now := e.at(time.Minute)
	res, err := e.s.JobRunNow(e.ctx, &twicestore.JobBulkParams{Filter: twicestore.JobFilter{IDs: []int64{scheduled, due, retry, running, 1 << 40}}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]twicestore.JobActionStatus{scheduled: twicestore.JobActionDone, due: twicestore.JobActionDone,
		retry: twicestore.JobActionDone, running: twicestore.JobActionWrongState, 1 << 40: twicestore.JobActionNotFound}
	if len(res.Results) != len(want) {
		t.Fatalf("JobRunNow results = %+v, want one per id", res.Results)
	}
	for _, r := range res.Results {
		if r.Status != want[r.ID] {
			t.Errorf("job %d: %s, want %s", r.ID, r.Status, want[r.ID])
		}
	}
	for id, at := range map[int64]time.Time{scheduled: now, retry: now, due: e.base} {
		if j := e.get(id); !j.RunAt.Equal(at) || j.State != twicetype.JobStateAvailable {
			t.Errorf("job %d after run-now: %s at %v, want available at %v", id, j.State, j.RunAt, at)
		}
	}
	if got := ids(e.fetch(now, 10, "node-b", kind)); len(got) != 3 {
		t.Fatalf("fetched at the run-now time: %v, want the three available jobs", got)
	}
}
