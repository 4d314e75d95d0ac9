package storetest

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// The operator's job actions with per-job results (cancel, delete, retry),
// the cancelled state, and the bound on the error history.
var cancelTests = []test{
	{"CancelAvailable", testCancelAvailable},
	{"CancelRunningRequestsStop", testCancelRunning},
	{"CancelFinishedChangesNothing", testCancelFinished},
	{"CancelRacesCompletion", testCancelRacesCompletion},
	{"RescueFinishesCancelRequested", testRescueCancelRequested},
	{"FinishCancelledKeepsOwnNote", testFinishCancelledNote},
	{"Delete", testDelete},
	{"RetryResults", testRetryResults},
	{"RetryConflictDoesNotAbortOthers", testRetryConflict},
	{"ListNodeAndTiming", testListNodeAndTiming},
	{"DeleteFinishedCancelled", testDeleteFinishedCancelled},
	{"ErrorHistoryBounded", testErrorHistoryBounded},
	{"FilterValidated", testFilterValidated},
	{"ActionsInTx", testActionsInTx},
}

func (e *env) cancel(by, reason string, now time.Time, ids ...int64) *twicestore.JobBulkResult {
	e.t.Helper()
	res, err := e.s.JobCancel(e.ctx, &twicestore.JobCancelParams{
		Filter: twicestore.JobFilter{IDs: ids}, By: by, Reason: reason, Now: now})
	if err != nil {
		e.t.Fatalf("JobCancel(%v): %v", ids, err)
	}
	return res
}

func (e *env) deleteJobs(ids ...int64) *twicestore.JobBulkResult {
	e.t.Helper()
	res, err := e.s.JobDelete(e.ctx, &twicestore.JobBulkParams{Filter: twicestore.JobFilter{IDs: ids}})
	if err != nil {
		e.t.Fatalf("JobDelete(%v): %v", ids, err)
	}
	return res
}

func (e *env) retryResults(p *twicestore.JobBulkParams) *twicestore.JobBulkResult {
	e.t.Helper()
	res, err := e.s.JobRetry(e.ctx, p)
	if err != nil {
		e.t.Fatalf("JobRetry: %v", err)
	}
	return res
}

func (e *env) extendRes(until time.Time, leases ...twicestore.JobLease) *twicestore.JobExtendLeaseResult {
	e.t.Helper()
	res, err := e.s.JobExtendLease(e.ctx, &twicestore.JobExtendLeaseParams{Leases: leases, LeaseUntil: until})
	if err != nil {
		e.t.Fatalf("JobExtendLease: %v", err)
	}
	return res
}

// checkResults fails unless res reports exactly want, and lists as changed
// exactly the done and cancel-requested ones.
func checkResults(t *testing.T, what string, res *twicestore.JobBulkResult, want ...twicestore.JobActionResult) {
	t.Helper()
	if !slices.Equal(res.Results, want) {
		t.Errorf("%s: Results = %+v,\nwant %+v", what, res.Results, want)
	}
	var changed []int64
	for _, r := range want {
		if r.Status == twicestore.JobActionDone || r.Status == twicestore.JobActionCancelRequested {
			changed = append(changed, r.ID)
		}
	}
	if !slices.Equal(res.IDs, changed) {
		t.Errorf("%s: IDs = %v, want %v", what, res.IDs, changed)
	}
}

func testCancelAvailable(t *testing.T, e *env) {
	const kind = "storetest.cancelavail.v1"
	due := e.insertOne(e.job(kind))
	later := e.job(kind)
	later.RunAt = e.at(time.Hour) // scheduled: a delay, a backoff or a snooze
	scheduled := e.insertOne(later)

	now := e.at(time.Minute)
	res := e.cancel("ops@host", "wrong customer", now, scheduled.ID, due.ID)
	checkResults(t, "cancel", res,
		twicestore.JobActionResult{ID: due.ID, Status: twicestore.JobActionDone, State: twicetype.JobStateCancelled},
		twicestore.JobActionResult{ID: scheduled.ID, Status: twicestore.JobActionDone, State: twicetype.JobStateCancelled})
	for _, j := range []*twicetype.JobRow{due, scheduled} {
		want := *j
		want.State = twicetype.JobStateCancelled
		want.FinishedAt = now
		want.Cancel = &twicetype.CancelRequest{At: now, By: "ops@host", Reason: "wrong customer"}
		want.Note = "cancelled by ops@host: wrong customer"
		checkJob(t, "cancelled job", e.get(j.ID), &want)
		if !e.get(j.ID).State.Finished() {
			t.Errorf("cancelled is not a finished state")
		}
	}
	if got := e.fetch(e.at(2*time.Hour), 10, "node-a", kind); len(got) != 0 {
		t.Fatalf("a cancelled job was fetched: %v", ids(got))
	}
}

func testCancelRunning(t *testing.T, e *env) {
	const kind = "storetest.cancelrun.v1"
	e.insert(e.job(kind), e.job(kind))
	jobs := e.fetch(e.base, 2, "node-a", kind)
	target, other := jobs[0], jobs[1]

	asked := e.at(10 * time.Second)
	res := e.cancel("ops", "stuck", asked, target.ID)
	checkResults(t, "cancel of a running job", res,
		twicestore.JobActionResult{ID: target.ID, Status: twicestore.JobActionCancelRequested, State: twicetype.JobStateRunning})
	want := *target
	want.Cancel = &twicetype.CancelRequest{At: asked, By: "ops", Reason: "stuck"}
	checkJob(t, "job with a cancel request", e.get(target.ID), &want) // still running, lease as it was

	// A second request keeps the first: who asked first, and when.
	res = e.cancel("someone else", "again", e.at(20*time.Second), target.ID)
	checkResults(t, "second cancel", res,
		twicestore.JobActionResult{ID: target.ID, Status: twicestore.JobActionCancelRequested, State: twicetype.JobStateRunning})
	checkJob(t, "job after a second request", e.get(target.ID), &want)

	// The worker learns at its next heartbeat, and only of its own job.
	until := e.at(2 * time.Minute)
	ext := e.extendRes(until, twicestore.JobLease{ID: target.ID, Epoch: target.Epoch},
		twicestore.JobLease{ID: other.ID, Epoch: other.Epoch})
	if !slices.Equal(ext.Extended, sorted([]int64{target.ID, other.ID})) || !slices.Equal(ext.CancelRequested, []int64{target.ID}) {
		t.Fatalf("JobExtendLease = %+v, want both extended and a cancel request for %d", ext, target.ID)
	}
	// A lost lease reports nothing, cancel or not.
	if ext := e.extendRes(until, twicestore.JobLease{ID: target.ID, Epoch: target.Epoch + 1}); len(ext.Extended)+len(ext.CancelRequested) != 0 {
		t.Fatalf("JobExtendLease of a stale epoch = %+v", ext)
	}

	// The worker ends it as cancelled; the note comes from the request.
	done := e.at(30 * time.Second)
	if applied := e.finish(&twicestore.JobOutcome{ID: target.ID, Epoch: target.Epoch, State: twicetype.JobStateCancelled,
		FinishedAt: done, Error: &twicetype.AttemptError{Attempt: 1, At: done, Error: "context canceled"}}); !applied[0] {
		t.Fatal("cancelled outcome not applied")
	}
	want.State = twicetype.JobStateCancelled
	want.LeaseUntil = time.Time{}
	want.FinishedAt = done
	want.Note = "cancelled by ops: stuck"
	want.Errors = []twicetype.AttemptError{{Attempt: 1, At: done, Error: "context canceled"}}
	checkJob(t, "job its worker cancelled", e.get(target.ID), &want)
}

func testCancelFinished(t *testing.T, e *env) {
	const kind = "storetest.cancelfinished.v1"
	e.insertOne(e.job(kind))
	completed := e.fetchOne(e.base, kind)
	e.complete(completed, e.at(time.Second))
	e.insertOne(e.job(kind))
	dead := e.kill(kind, e.at(time.Second))
	e.insertOne(e.job(kind))
	discarded := e.kill(kind, e.at(time.Second))
	e.discard(&twicestore.JobBulkParams{Filter: twicestore.JobFilter{IDs: []int64{discarded.ID}}, Now: e.at(time.Second)})
	cancelled := e.insertOne(e.job(kind))
	e.cancel("ops", "first", e.at(time.Second), cancelled.ID)

	before := map[int64]*twicetype.JobRow{}
	for _, id := range []int64{completed.ID, dead.ID, discarded.ID, cancelled.ID} {
		before[id] = e.get(id)
	}
	const missing = 1 << 40
	res := e.cancel("ops", "again", e.at(time.Minute), missing, cancelled.ID, discarded.ID, dead.ID, completed.ID)
	checkResults(t, "cancel of finished jobs", res,
		twicestore.JobActionResult{ID: completed.ID, Status: twicestore.JobActionAlreadyFinished, State: twicetype.JobStateCompleted},
		twicestore.JobActionResult{ID: dead.ID, Status: twicestore.JobActionAlreadyFinished, State: twicetype.JobStateDead},
		twicestore.JobActionResult{ID: discarded.ID, Status: twicestore.JobActionAlreadyFinished, State: twicetype.JobStateDiscarded},
		twicestore.JobActionResult{ID: cancelled.ID, Status: twicestore.JobActionAlreadyFinished, State: twicetype.JobStateCancelled},
		twicestore.JobActionResult{ID: missing, Status: twicestore.JobActionNotFound})
	for id, j := range before {
		checkJob(t, "finished job after a cancel", e.get(id), j)
	}
}

// testCancelRacesCompletion races an operator's cancel against the worker
// completing the same running job, many times: exactly one of them wins,
// and both sides can tell which. Either the completion lands first, and the
// cancel reports the job already finished; or the cancel request lands
// first, and the worker's completion still wins (a request only asks), so
// the cancelled outcome the worker would send next is refused.
func testCancelRacesCompletion(t *testing.T, e *env) {
	const (
		kind   = "storetest.cancelrace.v1"
		rounds = 20
	)
	var ps []*twicestore.JobInsertParams
	for range rounds {
		ps = append(ps, e.job(kind))
	}
	e.insert(ps...)
	jobs := e.fetch(e.base, rounds, "node-a", kind)
	if len(jobs) != rounds {
		t.Fatalf("fetched %d jobs, want %d", len(jobs), rounds)
	}
	for _, j := range jobs {
		var (
			wg        sync.WaitGroup
			start     = make(chan struct{})
			cancelRes *twicestore.JobBulkResult
			cancelErr error
			completed bool
			finishErr error
		)
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			cancelRes, cancelErr = e.s.JobCancel(e.ctx, &twicestore.JobCancelParams{
				Filter: twicestore.JobFilter{IDs: []int64{j.ID}}, By: "ops", Now: e.at(time.Second)})
		}()
		go func() {
			defer wg.Done()
			<-start
			var res *twicestore.JobFinishResult
			res, finishErr = e.s.JobFinish(e.ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{
				{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted, FinishedAt: e.at(time.Second)}}})
			completed = finishErr == nil && res.Applied[0]
		}()
		close(start)
		wg.Wait()
		if cancelErr != nil || finishErr != nil {
			t.Fatalf("job %d: cancel error %v, finish error %v", j.ID, cancelErr, finishErr)
		}
		if !completed {
			t.Fatalf("job %d: the completion of a running job was refused", j.ID)
		}
		// The worker acting on the request, if it saw one, is refused.
		late := e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCancelled,
			FinishedAt: e.at(2 * time.Second)})
		if late[0] {
			t.Fatalf("job %d: both the completion and the cancelled outcome were applied", j.ID)
		}
		got := e.get(j.ID)
		if got.State != twicetype.JobStateCompleted {
			t.Fatalf("job %d ended %s, want completed", j.ID, got.State)
		}
		switch r := cancelRes.Results; {
		case len(r) != 1:
			t.Fatalf("job %d: cancel results %+v", j.ID, r)
		case r[0].Status == twicestore.JobActionAlreadyFinished:
			if r[0].State != twicetype.JobStateCompleted || got.Cancel != nil {
				t.Fatalf("job %d: cancel lost to the completion but reports %+v, job's request %+v", j.ID, r[0], got.Cancel)
			}
		case r[0].Status == twicestore.JobActionCancelRequested:
			if got.Cancel == nil {
				t.Fatalf("job %d: cancel reports a request the job does not carry", j.ID)
			}
		default:
			t.Fatalf("job %d: cancel result %+v", j.ID, r[0])
		}
	}
}

// testRescueCancelRequested: a job asked to stop whose worker died before
// ending it is cancelled by the rescue, not run again.
func testRescueCancelRequested(t *testing.T, e *env) {
	const kind = "storetest.rescuecancel.v1"
	e.insert(e.job(kind), e.job(kind))
	jobs := e.fetch(e.base, 2, "node-a", kind)
	asked, plain := jobs[0], jobs[1]
	e.cancel("ops", "stuck", e.at(time.Second), asked.ID)
	now := e.at(2 * time.Minute)
	res := e.rescue(now, 0)
	if !slices.Equal(res.Cancelled, []int64{asked.ID}) || !slices.Equal(res.Requeued, []int64{plain.ID}) || len(res.Dead) != 0 {
		t.Fatalf("rescue = %+v, want %d cancelled and %d requeued", res, asked.ID, plain.ID)
	}
	got := e.get(asked.ID)
	if got.State != twicetype.JobStateCancelled || !got.FinishedAt.Equal(now) || got.Note != "cancelled by ops: stuck" {
		t.Fatalf("rescued job asked to stop: state %s, finished %v, note %q", got.State, got.FinishedAt, got.Note)
	}
	checkLeaseError(t, got, 1)
	if again := e.fetch(e.at(time.Hour), 10, "node-b", kind); len(again) != 1 || again[0].ID != plain.ID {
		t.Fatalf("fetch after the rescue = %v, want only [%d]", ids(again), plain.ID)
	}
}

func testFinishCancelledNote(t *testing.T, e *env) {
	const kind = "storetest.cancelnote.v1"
	e.insert(e.job(kind), e.job(kind))
	jobs := e.fetch(e.base, 2, "node-a", kind)
	asked, own := jobs[0], jobs[1]
	e.cancel("ops", "", e.at(time.Second), asked.ID)
	done := e.at(2 * time.Second)
	// A handler ending its own job as cancelled, with its own reason, and a
	// worker ending one an operator asked to stop, with no note of its own.
	e.finish(
		&twicestore.JobOutcome{ID: asked.ID, Epoch: asked.Epoch, State: twicetype.JobStateCancelled, FinishedAt: done},
		&twicestore.JobOutcome{ID: own.ID, Epoch: own.Epoch, State: twicetype.JobStateCancelled, FinishedAt: done,
			Note: "order withdrawn"},
	)
	if got := e.get(asked.ID); got.State != twicetype.JobStateCancelled || got.Note != "cancelled by ops" || !got.FinishedAt.Equal(done) {
		t.Errorf("job cancelled on request: state %s, note %q, finished %v", got.State, got.Note, got.FinishedAt)
	}
	if got := e.get(own.ID); got.State != twicetype.JobStateCancelled || got.Note != "order withdrawn" || got.Cancel != nil {
		t.Errorf("job its handler cancelled: state %s, note %q, request %+v", got.State, got.Note, got.Cancel)
	}
}

func testDelete(t *testing.T, e *env) {
	const kind = "storetest.delete.v1"
	e.insertOne(e.job(kind))
	stillRunning := e.fetchOne(e.base, kind)
	e.insertOne(e.job(kind))
	completed := e.fetchOne(e.base, kind)
	e.complete(completed, e.at(time.Second))
	available := e.insertOne(e.job(kind))
	const missing = 1 << 40
	res := e.deleteJobs(available.ID, completed.ID, stillRunning.ID, missing)
	checkResults(t, "delete", res,
		twicestore.JobActionResult{ID: stillRunning.ID, Status: twicestore.JobActionWrongState, State: twicetype.JobStateRunning},
		twicestore.JobActionResult{ID: completed.ID, Status: twicestore.JobActionDone},
		twicestore.JobActionResult{ID: available.ID, Status: twicestore.JobActionDone},
		twicestore.JobActionResult{ID: missing, Status: twicestore.JobActionNotFound})
	for _, id := range []int64{available.ID, completed.ID} {
		if _, err := e.s.JobGet(e.ctx, &twicestore.JobGetParams{ID: id}); err == nil {
			t.Errorf("job %d still there after its delete", id)
		}
	}
	checkJob(t, "running job after a refused delete", e.get(stillRunning.ID), stillRunning)
}

func testRetryResults(t *testing.T, e *env) {
	const kind = "storetest.retryresults.v1"
	e.insertOne(e.job(kind))
	dead := e.kill(kind, e.at(time.Second))
	e.insertOne(e.job(kind))
	discarded := e.kill(kind, e.at(time.Second))
	e.discard(&twicestore.JobBulkParams{Filter: twicestore.JobFilter{IDs: []int64{discarded.ID}}, Now: e.at(time.Second)})
	cancelled := e.insertOne(e.job(kind))
	e.cancel("ops", "oops", e.at(time.Second), cancelled.ID)
	e.insertOne(e.job(kind))
	running := e.fetchOne(e.at(time.Second), kind)
	available := e.insertOne(e.job(kind))

	now := e.at(time.Minute)
	const missing = 1 << 40
	res := e.retryResults(&twicestore.JobBulkParams{Now: now,
		Filter: twicestore.JobFilter{IDs: []int64{missing, available.ID, running.ID, cancelled.ID, discarded.ID, dead.ID}}})
	checkResults(t, "retry", res,
		twicestore.JobActionResult{ID: dead.ID, Status: twicestore.JobActionDone, State: twicetype.JobStateAvailable},
		twicestore.JobActionResult{ID: discarded.ID, Status: twicestore.JobActionDone, State: twicetype.JobStateAvailable},
		twicestore.JobActionResult{ID: cancelled.ID, Status: twicestore.JobActionDone, State: twicetype.JobStateAvailable},
		twicestore.JobActionResult{ID: running.ID, Status: twicestore.JobActionWrongState, State: twicetype.JobStateRunning},
		twicestore.JobActionResult{ID: available.ID, Status: twicestore.JobActionWrongState, State: twicetype.JobStateAvailable},
		twicestore.JobActionResult{ID: missing, Status: twicestore.JobActionNotFound})
	for _, id := range []int64{dead.ID, discarded.ID, cancelled.ID} {
		got := e.get(id)
		if got.State != twicetype.JobStateAvailable || got.Attempt != 0 || !got.RunAt.Equal(now) ||
			!got.FinishedAt.IsZero() || got.Cancel != nil || got.Snoozes != 0 {
			t.Errorf("retried job %d: state %s, attempt %d, run at %v, finished %v, cancel %+v", id,
				got.State, got.Attempt, got.RunAt, got.FinishedAt, got.Cancel)
		}
	}
	if got := e.get(dead.ID); len(got.Errors) != 1 {
		t.Errorf("retried dead job lost its error history: %+v", got.Errors)
	}
	// The retried cancelled job runs without being asked to stop again.
	e.fetch(now, 10, "node-b", kind)
	r := e.get(cancelled.ID)
	if ext := e.extendRes(e.at(time.Hour), twicestore.JobLease{ID: r.ID, Epoch: r.Epoch}); len(ext.CancelRequested) != 0 {
		t.Errorf("retried cancelled job still reports a cancel request: %+v", ext)
	}
}

// testRetryConflict: one job whose unique key a live job holds must not
// keep the others from being retried (dlq retry --all used to retry none).
func testRetryConflict(t *testing.T, e *env) {
	const kind = "storetest.retryconflict.v1"
	uniq := func(key string) *twicestore.JobInsertParams {
		p := e.job(kind)
		p.UniqueKey = key
		return p
	}
	e.insertOne(uniq("held"))
	heldDead := e.kill(kind, e.at(time.Second))
	again := uniq("held")     // enqueued again after it died
	again.Queue = "elsewhere" // out of the way of the fetches below
	holder := e.insertOne(again)
	e.insertOne(e.job(kind))
	plain := e.kill(kind, e.at(time.Second))
	// Two dead jobs with the same key: only one may come back.
	e.insertOne(uniq("twin"))
	twin1 := e.kill(kind, e.at(time.Second))
	e.insertOne(uniq("twin"))
	twin2 := e.kill(kind, e.at(time.Second))

	res := e.retryResults(&twicestore.JobBulkParams{Now: e.at(time.Minute),
		Filter: twicestore.JobFilter{State: twicetype.JobStateDead, Kind: kind}})
	checkResults(t, "retry of every dead job", res,
		twicestore.JobActionResult{ID: heldDead.ID, Status: twicestore.JobActionConflict, State: twicetype.JobStateDead, HolderID: holder.ID},
		twicestore.JobActionResult{ID: plain.ID, Status: twicestore.JobActionDone, State: twicetype.JobStateAvailable},
		twicestore.JobActionResult{ID: twin1.ID, Status: twicestore.JobActionDone, State: twicetype.JobStateAvailable},
		twicestore.JobActionResult{ID: twin2.ID, Status: twicestore.JobActionConflict, State: twicetype.JobStateDead, HolderID: twin1.ID})
	checkJob(t, "job in conflict", e.get(heldDead.ID), heldDead)
	checkJob(t, "twin in conflict", e.get(twin2.ID), twin2)
}

func testListNodeAndTiming(t *testing.T, e *env) {
	const kind = "storetest.listtiming.v1"
	e.insert(e.job(kind), e.job(kind))
	onA := e.fetch(e.base, 1, "node-a", kind)[0]
	onB := e.fetch(e.base, 1, "node-b", kind)[0]
	due := e.insertOne(e.job(kind))
	later := e.job(kind)
	later.RunAt = e.at(time.Hour)
	scheduled := e.insertOne(later)
	now := e.at(time.Minute)
	for _, tc := range []struct {
		name   string
		filter twicestore.JobFilter
		want   []int64
	}{
		{"node a", twicestore.JobFilter{Node: "node-a"}, descending(onA.ID)},
		{"node b running", twicestore.JobFilter{Node: "node-b", State: twicetype.JobStateRunning}, descending(onB.ID)},
		{"unknown node", twicestore.JobFilter{Node: "node-c"}, nil},
		{"due", twicestore.JobFilter{Timing: twicestore.JobDue, Now: now}, descending(due.ID)},
		{"scheduled", twicestore.JobFilter{Timing: twicestore.JobScheduled, Now: now}, descending(scheduled.ID)},
		{"scheduled job due later", twicestore.JobFilter{Timing: twicestore.JobDue, Now: e.at(2 * time.Hour)}, descending(due.ID, scheduled.ID)},
		{"due with a running state", twicestore.JobFilter{Timing: twicestore.JobDue, State: twicetype.JobStateRunning, Now: now}, nil},
	} {
		if got := e.list(&twicestore.JobListParams{Filter: tc.filter}); !slices.Equal(got, tc.want) {
			t.Errorf("%s: JobList = %v, want %v", tc.name, got, tc.want)
		}
	}
	res, err := e.s.JobCount(e.ctx, &twicestore.JobCountParams{Filter: twicestore.JobFilter{Timing: twicestore.JobScheduled, Now: now}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Counts) != 1 || res.Counts[0].Count != 1 {
		t.Errorf("JobCount of scheduled jobs = %+v, want one", res.Counts)
	}
	// Keyset pages work with the new filters too.
	page := e.list(&twicestore.JobListParams{Filter: twicestore.JobFilter{Kind: kind}, BeforeID: scheduled.ID, Limit: 1})
	if !slices.Equal(page, []int64{due.ID}) {
		t.Errorf("page before %d = %v, want [%d]", scheduled.ID, page, due.ID)
	}
}

func testDeleteFinishedCancelled(t *testing.T, e *env) {
	const kind = "storetest.retentioncancel.v1"
	old := e.insertOne(e.job(kind))
	recent := e.insertOne(e.job(kind))
	e.cancel("ops", "", e.at(-3*time.Hour), old.ID)
	e.cancel("ops", "", e.at(-time.Minute), recent.ID)
	del := func(p *twicestore.JobDeleteFinishedParams) int {
		t.Helper()
		res, err := e.s.JobDeleteFinished(e.ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return res.Deleted
	}
	if n := del(&twicestore.JobDeleteFinishedParams{CompletedBefore: e.base, DeadBefore: e.base, DiscardedBefore: e.base, Limit: 10}); n != 0 {
		t.Fatalf("deleted %d cancelled jobs with no cancelled cut-off", n)
	}
	if n := del(&twicestore.JobDeleteFinishedParams{CancelledBefore: e.at(-time.Hour), Limit: 10}); n != 1 {
		t.Fatalf("deleted %d, want the old cancelled job", n)
	}
	e.get(recent.ID)
}

// testErrorHistoryBounded: a job failing many times keeps its first
// ErrorsKeptFirst and last ErrorsKeptLast errors, whether the errors come
// from outcomes or from rescues of expired leases.
func testErrorHistoryBounded(t *testing.T, e *env) {
	const kind = "storetest.errorbound.v1"
	p := e.job(kind)
	p.MaxAttempts = 100
	j := e.insertOne(p)
	const failures = 15
	at := e.base
	for i := 1; i <= failures; i++ {
		f := e.fetchOne(at, kind)
		if i%5 == 0 { // now and then the worker dies and the lease expires
			at = f.LeaseUntil.Add(time.Second)
			e.rescue(at, 0)
			continue
		}
		e.finish(&twicestore.JobOutcome{ID: f.ID, Epoch: f.Epoch, State: twicetype.JobStateAvailable, RunAt: at,
			Error: &twicetype.AttemptError{Attempt: f.Attempt, At: at, Error: "boom"}})
	}
	got := e.get(j.ID).Errors
	var attempts []int
	for _, a := range got {
		attempts = append(attempts, a.Attempt)
	}
	want := []int{1, 2}
	for a := failures - twicestore.ErrorsKeptLast + 1; a <= failures; a++ {
		want = append(want, a)
	}
	if !slices.Equal(attempts, want) {
		t.Fatalf("error history attempts = %v, want %v", attempts, want)
	}
	if got[len(got)-1].Error == "boom" {
		t.Errorf("last error %q should be the lease expiry of attempt %d", got[len(got)-1].Error, failures)
	}
	// The job ends dead with one more error: still bounded.
	f := e.fetchOne(at, kind)
	e.finish(&twicestore.JobOutcome{ID: f.ID, Epoch: f.Epoch, State: twicetype.JobStateDead, FinishedAt: at,
		Error: &twicetype.AttemptError{Attempt: f.Attempt, At: at, Error: "final"}})
	final := e.get(j.ID).Errors
	if len(final) != twicestore.ErrorsKeptFirst+twicestore.ErrorsKeptLast || final[0].Attempt != 1 ||
		final[len(final)-1].Error != "final" {
		t.Fatalf("final error history: %d entries, first attempt %d, last %q", len(final), final[0].Attempt, final[len(final)-1].Error)
	}
}

func testFilterValidated(t *testing.T, e *env) {
	for _, f := range []twicestore.JobFilter{{State: "bogus"}, {Timing: "soon"}} {
		if _, err := e.s.JobList(e.ctx, &twicestore.JobListParams{Filter: f}); err == nil {
			t.Errorf("JobList accepted filter %+v", f)
		}
		if _, err := e.s.JobCancel(e.ctx, &twicestore.JobCancelParams{Filter: f}); err == nil {
			t.Errorf("JobCancel accepted filter %+v", f)
		}
	}
}

// testActionsInTx: cancel, delete and retry join a transaction the caller
// began (the admin API's …Tx variants), and a rollback undoes them.
func testActionsInTx(t *testing.T, e *env) {
	const kind = "storetest.actionstx.v1"
	e.insertOne(e.job(kind))
	dead := e.kill(kind, e.at(time.Second))
	waiting := e.insertOne(e.job(kind))
	gone := e.insertOne(e.job(kind))

	tx := e.begin()
	if res, err := tx.JobCancel(e.ctx, &twicestore.JobCancelParams{Filter: twicestore.JobFilter{IDs: []int64{waiting.ID}}}); err != nil || len(res.IDs) != 1 {
		t.Fatalf("JobCancel in a transaction: %+v, %v", res, err)
	}
	if res, err := tx.JobDelete(e.ctx, &twicestore.JobBulkParams{Filter: twicestore.JobFilter{IDs: []int64{gone.ID}}}); err != nil || len(res.IDs) != 1 {
		t.Fatalf("JobDelete in a transaction: %+v, %v", res, err)
	}
	if res, err := tx.JobRetry(e.ctx, &twicestore.JobBulkParams{Filter: twicestore.JobFilter{IDs: []int64{dead.ID}}}); err != nil || len(res.IDs) != 1 {
		t.Fatalf("JobRetry in a transaction: %+v, %v", res, err)
	}
	if err := tx.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	checkJob(t, "job whose cancel was rolled back", e.get(waiting.ID), waiting)
	checkJob(t, "job whose delete was rolled back", e.get(gone.ID), gone)
	checkJob(t, "job whose retry was rolled back", e.get(dead.ID), dead)
}
