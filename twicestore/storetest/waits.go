package storetest

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

var waitTests = []test{
	{"AwaitThenSignal", testWaitAwaitThenSignal},
	{"SignalThenAwait", testWaitSignalThenAwait},
	{"DuplicateSignal", testWaitDuplicate},
	{"Timeout", testWaitTimeout},
	{"SignalRacesTimeout", testWaitRace},
	{"FinishedOrUnknownJob", testWaitFinished},
	{"WaitingNotFetchedHoldsNoSlot", testWaitNoSlot},
	{"CancelWaiting", testWaitCancel},
	{"ParkFenced", testWaitFenced},
	{"BadSignalStoresNothing", testWaitBadSignal},
	{"ListedAndCounted", testWaitListed},
	{"SignalsLeaveWithTheirJob", testWaitRetention},
	{"SignalInTransaction", testWaitTx},
	{"UniqueKeyHeldWhileWaiting", testWaitUnique},
}

const waitKind = "storetest.wait.v1"

// park fetches a job of waitKind at now and parks it on name until
// timeout (zero: none), failing unless the park applied.
func (e *env) park(now time.Time, name string, timeout time.Time) *twicetype.JobRow {
	e.t.Helper()
	j := e.fetchOne(now, waitKind)
	e.parkFetched(j, name, timeout)
	return j
}

func (e *env) parkFetched(j *twicetype.JobRow, name string, timeout time.Time) {
	e.t.Helper()
	if got := e.finish(parkOutcome(j, name, timeout)); !got[0] {
		e.t.Fatalf("park of job %d on %q not applied", j.ID, name)
	}
}

func parkOutcome(j *twicetype.JobRow, name string, timeout time.Time) *twicestore.JobOutcome {
	return &twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateWaiting, RunAt: timeout,
		RefundAttempt: true, WaitName: name, SignalSeq: j.SignalSeq}
}

func (e *env) signal(id int64, name, payload string, now time.Time) *twicestore.JobSignalResult {
	e.t.Helper()
	res, err := e.s.JobSignal(e.ctx, &twicestore.JobSignalParams{JobID: id, Name: name, Payload: []byte(payload),
		Sender: "ops@host", Now: now})
	if err != nil {
		e.t.Fatalf("JobSignal(%d, %q): %v", id, name, err)
	}
	return res
}

func (e *env) signalGet(id int64, name string) (*twicetype.Signal, error) {
	return e.s.JobSignalGet(e.ctx, &twicestore.JobSignalGetParams{JobID: id, Name: name})
}

// testWaitAwaitThenSignal: a parked job leaves running, holds no lease,
// gets its attempt back, is not fetched; a signal of its name makes it
// available and is read back.
func testWaitAwaitThenSignal(t *testing.T, e *env) {
	id := e.insertOne(e.job(waitKind)).ID
	e.park(e.base, "approve", time.Time{})
	j := e.get(id)
	if j.State != twicetype.JobStateWaiting || j.WaitName != "approve" || j.Attempt != 0 ||
		!j.LeaseUntil.IsZero() || !j.RunAt.Equal(twicestore.WaitNever) {
		t.Fatalf("parked job = state %s, wait %q, attempt %d, lease %v, run at %v; want waiting on approve, attempt 0, no lease, WaitNever",
			j.State, j.WaitName, j.Attempt, j.LeaseUntil, j.RunAt)
	}
	if got := e.fetch(e.at(1000*time.Hour), 10, "node-b", waitKind); len(got) != 0 {
		t.Fatalf("a waiting job was fetched: %d jobs", len(got))
	}
	if _, err := e.signalGet(id, "approve"); !errors.Is(err, twicestore.ErrNotFound) {
		t.Fatalf("JobSignalGet before any signal: %v, want ErrNotFound", err)
	}
	res := e.signal(id, "approve", `{"by":"ann"}`, e.at(time.Minute))
	if !res.Woke || res.Existing != nil {
		t.Fatalf("JobSignal = %+v, want Woke and no Existing", res)
	}
	j = e.get(id)
	if j.State != twicetype.JobStateAvailable || !j.RunAt.Equal(e.at(time.Minute)) || j.SignalSeq != 1 {
		t.Fatalf("signalled job = state %s, run at %v, signal seq %d; want available at the signal, seq 1", j.State, j.RunAt, j.SignalSeq)
	}
	sig, err := e.signalGet(id, "approve")
	if err != nil || string(sig.Payload) != `{"by":"ann"}` || sig.TimedOut || sig.Sender != "ops@host" ||
		!sig.At.Equal(e.at(time.Minute)) || sig.JobID != id || sig.Name != "approve" {
		t.Fatalf("JobSignalGet = %+v, %v", sig, err)
	}
	again := e.fetchOne(e.at(time.Minute), waitKind)
	if again.ID != id || again.Attempt != 1 || again.SignalSeq != 1 {
		t.Fatalf("fetched after the signal: job %d attempt %d seq %d; want %d, attempt 1, seq 1", again.ID, again.Attempt, again.SignalSeq, id)
	}
}

// testWaitSignalThenAwait: a signal that arrives while the job runs is
// kept, and the park that follows (with the fetched SignalSeq) makes the
// job available at once rather than waiting.
func testWaitSignalThenAwait(t *testing.T, e *env) {
	e.insertOne(e.job(waitKind))
	j := e.fetchOne(e.base, waitKind)
	if res := e.signal(j.ID, "paid", `"ok"`, e.at(time.Second)); res.Woke || res.Existing != nil {
		t.Fatalf("JobSignal to a running job = %+v, want stored, not woken", res)
	}
	if got := e.get(j.ID); got.State != twicetype.JobStateRunning {
		t.Fatalf("a signal changed a running job's state to %s", got.State)
	}
	if got := e.finish(parkOutcome(j, "paid", time.Time{})); !got[0] {
		t.Fatal("park not applied")
	}
	got := e.get(j.ID)
	if got.State != twicetype.JobStateAvailable || got.Attempt != 0 || got.RunAt.After(e.at(time.Hour)) {
		t.Fatalf("job parked after its signal = state %s, attempt %d, run at %v; want available now, attempt 0",
			got.State, got.Attempt, got.RunAt)
	}
	if sig, err := e.signalGet(j.ID, "paid"); err != nil || string(sig.Payload) != `"ok"` {
		t.Fatalf("JobSignalGet = %+v, %v", sig, err)
	}
	// A signal of another name does not wake a job waiting on this one.
	j = e.fetchOne(e.at(time.Hour), waitKind)
	e.parkFetched(j, "shipped", time.Time{})
	if res := e.signal(j.ID, "other", `1`, e.at(2*time.Hour)); res.Woke {
		t.Fatal("a signal of another name woke the job")
	}
	if got := e.get(j.ID); got.State != twicetype.JobStateWaiting {
		t.Fatalf("after a signal of another name the job is %s, want waiting", got.State)
	}
}

// testWaitDuplicate: a second signal of a name changes nothing and
// returns the first.
func testWaitDuplicate(t *testing.T, e *env) {
	id := e.insertOne(e.job(waitKind)).ID
	e.park(e.base, "approve", time.Time{})
	e.signal(id, "approve", `{"n":1}`, e.at(time.Second))
	res := e.signal(id, "approve", `{"n":2}`, e.at(2*time.Second))
	if res.Woke || res.Existing == nil || string(res.Existing.Payload) != `{"n":1}` || !res.Existing.At.Equal(e.at(time.Second)) {
		t.Fatalf("duplicate JobSignal = %+v, want the first signal as Existing", res)
	}
	if j := e.get(id); j.SignalSeq != 1 || !j.RunAt.Equal(e.at(time.Second)) {
		t.Fatalf("after a duplicate: seq %d run at %v; want 1 and the first signal's time", j.SignalSeq, j.RunAt)
	}
	if sig, _ := e.signalGet(id, "approve"); sig == nil || string(sig.Payload) != `{"n":1}` {
		t.Fatalf("JobSignalGet after a duplicate = %+v, want the first payload", sig)
	}
	// Once the job finished, a repeat is still a duplicate; a new name is
	// refused.
	j := e.fetchOne(e.at(time.Second), waitKind)
	e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted, FinishedAt: e.at(3 * time.Second)})
	if res := e.signal(id, "approve", `{"n":3}`, e.at(4*time.Second)); res.Existing == nil || string(res.Existing.Payload) != `{"n":1}` {
		t.Fatalf("a repeat after the job completed = %+v, want the first signal as Existing", res)
	}
	if _, err := e.s.JobSignal(e.ctx, &twicestore.JobSignalParams{JobID: id, Name: "other", Now: e.at(4 * time.Second)}); !errors.Is(err, twicestore.ErrJobFinished) {
		t.Fatalf("a new signal after the job completed = %v, want ErrJobFinished", err)
	}
}

// testWaitTimeout: the timer resolves the wait as timed out when its
// time comes, not before; a signal after that is refused as Existing.
func testWaitTimeout(t *testing.T, e *env) {
	id := e.insertOne(e.job(waitKind)).ID
	e.park(e.base, "review", e.at(time.Hour))
	if j := e.get(id); !j.RunAt.Equal(e.at(time.Hour)) {
		t.Fatalf("parked run at %v, want the timeout", j.RunAt)
	}
	wake := func(now time.Time) []int64 {
		t.Helper()
		res, err := e.s.JobWakeDue(e.ctx, &twicestore.JobWakeDueParams{Now: now})
		if err != nil {
			t.Fatalf("JobWakeDue: %v", err)
		}
		return res.Woken
	}
	if got := wake(e.at(time.Hour - time.Second)); len(got) != 0 {
		t.Fatalf("JobWakeDue before the timeout woke %v", got)
	}
	if got := wake(e.at(time.Hour)); len(got) != 1 || got[0] != id {
		t.Fatalf("JobWakeDue at the timeout woke %v, want [%d]", got, id)
	}
	j := e.get(id)
	if j.State != twicetype.JobStateAvailable || !j.RunAt.Equal(e.at(time.Hour)) || j.SignalSeq != 1 {
		t.Fatalf("timed out job = state %s, run at %v, seq %d; want available at the timeout, seq 1", j.State, j.RunAt, j.SignalSeq)
	}
	sig, err := e.signalGet(id, "review")
	if err != nil || !sig.TimedOut || sig.Payload != nil || !sig.At.Equal(e.at(time.Hour)) {
		t.Fatalf("resolution after the timeout = %+v, %v; want TimedOut at the timeout", sig, err)
	}
	res := e.signal(id, "review", `1`, e.at(2*time.Hour))
	if res.Woke || res.Existing == nil || !res.Existing.TimedOut {
		t.Fatalf("a signal after the timeout = %+v, want Existing timed out", res)
	}
	if got := wake(e.at(3 * time.Hour)); len(got) != 0 {
		t.Fatalf("a second JobWakeDue woke %v", got)
	}
	// A timer fired early, by id: due at once, resolved at that time; a
	// wait without a timer too; another waiting job is left alone.
	early := e.insertOne(e.job(waitKind)).ID
	e.park(e.at(4*time.Hour), "review", e.at(100*time.Hour))
	never := e.insertOne(e.job(waitKind)).ID
	e.park(e.at(4*time.Hour), "review", time.Time{})
	other := e.insertOne(e.job(waitKind)).ID
	e.park(e.at(4*time.Hour), "review", e.at(5*time.Hour))
	byID, err := e.s.JobWakeDue(e.ctx, &twicestore.JobWakeDueParams{Now: e.at(4 * time.Hour), IDs: []int64{early, never, id}})
	if err != nil || len(byID.Woken) != 2 {
		t.Fatalf("JobWakeDue by ids = %+v, %v; want the two waiting ones woken", byID, err)
	}
	for _, w := range []int64{early, never} {
		j := e.get(w)
		sig, err := e.signalGet(w, "review")
		if j.State != twicetype.JobStateAvailable || !j.RunAt.Equal(e.at(4*time.Hour)) || err != nil || !sig.TimedOut || !sig.At.Equal(e.at(4*time.Hour)) {
			t.Fatalf("job %d fired early: state %s run at %v, resolution %+v %v; want available now, timed out now", w, j.State, j.RunAt, sig, err)
		}
	}
	if st := e.get(other).State; st != twicetype.JobStateWaiting {
		t.Fatalf("a job not named was woken: %s", st)
	}
}

// testWaitRace: a signal and the timer of the same wait, at once, on
// many jobs: each wait has exactly one resolution, and the loser says so.
func testWaitRace(t *testing.T, e *env) {
	const n = 20
	var ids []int64
	for range n {
		ids = append(ids, e.insertOne(e.job(waitKind)).ID)
	}
	for _, j := range e.fetch(e.base, n, "node-a", waitKind) {
		e.parkFetched(j, "race", e.at(time.Minute))
	}
	results := make([]*twicestore.JobSignalResult, n)
	var woken []int64
	var wg sync.WaitGroup
	errs := make(chan error, n+1)
	for i, id := range ids {
		wg.Go(func() {
			r, err := e.s.JobSignal(e.ctx, &twicestore.JobSignalParams{JobID: id, Name: "race", Payload: []byte(`1`), Now: e.at(time.Minute)})
			if err != nil {
				errs <- err
			}
			results[i] = r
		})
	}
	wg.Go(func() {
		r, err := e.s.JobWakeDue(e.ctx, &twicestore.JobWakeDueParams{Now: e.at(time.Minute)})
		if err != nil {
			errs <- err
			return
		}
		woken = r.Woken
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("race: %v", err)
	}
	timerWoke := map[int64]bool{}
	for _, id := range woken {
		timerWoke[id] = true
	}
	for i, id := range ids {
		sig, err := e.signalGet(id, "race")
		if err != nil {
			t.Fatalf("job %d: no resolution: %v", id, err)
		}
		signalWon := results[i].Existing == nil
		if signalWon == sig.TimedOut || signalWon == timerWoke[id] || signalWon != results[i].Woke {
			t.Fatalf("job %d: signal result %+v, timer woke %v, resolution timed out %v: not exactly one branch",
				id, results[i], timerWoke[id], sig.TimedOut)
		}
		if j := e.get(id); j.State != twicetype.JobStateAvailable || j.SignalSeq != 1 {
			t.Fatalf("job %d after the race: state %s seq %d, want available, seq 1", id, j.State, j.SignalSeq)
		}
	}
}

// testWaitFinished: a signal for a finished job or no job is refused and
// stores nothing.
func testWaitFinished(t *testing.T, e *env) {
	j := e.fetchOne(e.base, e.insertOne(e.job(waitKind)).Kind)
	e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted, FinishedAt: e.at(time.Second)})
	for _, id := range []int64{j.ID, j.ID + 1000} {
		_, err := e.s.JobSignal(e.ctx, &twicestore.JobSignalParams{JobID: id, Name: "late", Payload: []byte(`1`), Now: e.at(time.Minute)})
		want := twicestore.ErrJobFinished
		if id != j.ID {
			want = twicestore.ErrNotFound
		}
		if !errors.Is(err, want) {
			t.Fatalf("JobSignal(%d) = %v, want %v", id, err, want)
		}
		if _, err := e.signalGet(id, "late"); !errors.Is(err, twicestore.ErrNotFound) {
			t.Fatalf("a refused signal was stored: %v", err)
		}
	}
}

// testWaitNoSlot: waiting jobs hold no concurrency slot: a kind limited to
// one running job, with 100 jobs waiting, runs a new job at once.
func testWaitNoSlot(t *testing.T, e *env) {
	const n = 100
	e.insertN(n, func(int) *twicestore.JobInsertParams { return e.job(waitKind) })
	limits := map[string]twicestore.KindLimit{waitKind: {Global: 1}}
	for range n {
		j := e.fetchLimited(e.base, 1, limits, waitKind).Jobs
		if len(j) != 1 {
			t.Fatalf("the limited fetch found %d jobs, want 1 (the parked ones hold no slot)", len(j))
		}
		e.parkFetched(j[0], "later", time.Time{})
	}
	fresh := e.insertOne(e.job(waitKind)).ID
	got := e.fetchLimited(e.at(time.Second), 1, limits, waitKind).Jobs
	if len(got) != 1 || got[0].ID != fresh {
		t.Fatalf("with %d jobs waiting, the limited fetch got %d jobs, want the new job %d", n, len(got), fresh)
	}
}

// testWaitCancel: a waiting job is cancelled at once, and a signal for it
// afterwards is refused.
func testWaitCancel(t *testing.T, e *env) {
	id := e.insertOne(e.job(waitKind)).ID
	e.park(e.base, "approve", time.Time{})
	e.cancel("ops", "no longer needed", e.at(time.Second), id)
	if j := e.get(id); j.State != twicetype.JobStateCancelled {
		t.Fatalf("cancelled waiting job is %s, want cancelled", j.State)
	}
	if _, err := e.s.JobSignal(e.ctx, &twicestore.JobSignalParams{JobID: id, Name: "approve", Now: e.at(time.Minute)}); !errors.Is(err, twicestore.ErrJobFinished) {
		t.Fatalf("JobSignal to a cancelled job = %v, want ErrJobFinished", err)
	}
}

// testWaitFenced: a park from a delivery that lost the job writes
// nothing, and neither a rescue nor a retry by hand touches a waiting job.
func testWaitFenced(t *testing.T, e *env) {
	id := e.insertOne(e.job(waitKind)).ID
	j := e.fetchOne(e.base, waitKind)
	stale := *j
	stale.Epoch--
	if got := e.finish(parkOutcome(&stale, "approve", time.Time{})); got[0] {
		t.Fatal("a park with a stale epoch applied")
	}
	e.parkFetched(j, "approve", time.Time{})
	if res := e.rescue(e.at(1000*time.Hour), 0); len(res.Requeued)+len(res.Dead)+len(res.Cancelled) != 0 {
		t.Fatalf("a rescue touched a waiting job: %+v", res)
	}
	if got := e.finish(parkOutcome(j, "approve", time.Time{})); got[0] {
		t.Fatal("a second park of the same delivery applied to a waiting job")
	}
	if st := e.get(id).State; st != twicetype.JobStateWaiting {
		t.Fatalf("job is %s, want waiting", st)
	}
}

// testWaitBadSignal: a signal that cannot be stored is refused with
// CheckSignal's error, and nothing is stored.
func testWaitBadSignal(t *testing.T, e *env) {
	id := e.insertOne(e.job(waitKind)).ID
	e.park(e.base, "ok", time.Time{})
	for _, p := range []*twicestore.JobSignalParams{
		{JobID: id, Name: ""},
		{JobID: id, Name: strings.Repeat("n", 129)},
		{JobID: id, Name: "ok\x00"},
		{JobID: id, Name: "ok\xff"},
		{JobID: id, Name: "ok", Payload: []byte("\"\xff\"")},
		{JobID: id, Name: "ok", Payload: make([]byte, twicestore.MaxSignalPayloadBytes+1)},
		{JobID: 0, Name: "ok"},
	} {
		if _, err := e.s.JobSignal(e.ctx, p); err == nil {
			t.Fatalf("JobSignal(%q, %d payload bytes) stored", p.Name, len(p.Payload))
		}
	}
	if j := e.get(id); j.State != twicetype.JobStateWaiting || j.SignalSeq != 0 {
		t.Fatalf("after refused signals the job is %s with seq %d, want waiting, 0", j.State, j.SignalSeq)
	}
	if _, err := e.signalGet(id, "ok"); !errors.Is(err, twicestore.ErrNotFound) {
		t.Fatalf("a refused signal was stored: %v", err)
	}
}

// testWaitListed: listings and counts know the waiting state.
func testWaitListed(t *testing.T, e *env) {
	id := e.insertOne(e.job(waitKind)).ID
	e.insertOne(e.job(waitKind))
	e.park(e.base, "approve", time.Time{})
	if got := e.list(&twicestore.JobListParams{Filter: twicestore.JobFilter{State: twicetype.JobStateWaiting}}); len(got) != 1 || got[0] != id {
		t.Fatalf("JobList of waiting jobs = %v, want [%d]", got, id)
	}
	res, err := e.s.JobCount(e.ctx, &twicestore.JobCountParams{Filter: twicestore.JobFilter{Kind: waitKind}})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[twicetype.JobState]int{}
	for _, c := range res.Counts {
		counts[c.State] += c.Count
	}
	if counts[twicetype.JobStateWaiting] != 1 || counts[twicetype.JobStateAvailable] != 1 {
		t.Fatalf("JobCount = %v, want 1 waiting and 1 available", counts)
	}
}

// testWaitRetention: a waiting job is never pruned; a job's signals leave
// with it, whether deleted by hand or pruned once finished.
func testWaitRetention(t *testing.T, e *env) {
	waiting := e.insertOne(e.job(waitKind)).ID
	e.park(e.base, "a", time.Time{})
	e.signal(waiting, "b", `1`, e.at(time.Second))
	done := e.insertOne(e.job(waitKind)).ID
	j := e.fetchOne(e.at(time.Second), waitKind)
	e.signal(done, "a", `1`, e.at(time.Second))
	e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted, FinishedAt: e.at(2 * time.Second)})
	far := e.at(1000 * time.Hour)
	if _, err := e.s.JobDeleteFinished(e.ctx, &twicestore.JobDeleteFinishedParams{CompletedBefore: far, DeadBefore: far,
		DiscardedBefore: far, CancelledBefore: far, Limit: 1000}); err != nil {
		t.Fatal(err)
	}
	if st := e.get(waiting).State; st != twicetype.JobStateWaiting {
		t.Fatalf("after retention the waiting job is %s", st)
	}
	if _, err := e.signalGet(waiting, "b"); err != nil {
		t.Fatalf("retention took the signal of a waiting job: %v", err)
	}
	if _, err := e.signalGet(done, "a"); !errors.Is(err, twicestore.ErrNotFound) {
		t.Fatalf("the signal of a pruned job is left: %v", err)
	}
	e.deleteJobs(waiting)
	if _, err := e.signalGet(waiting, "b"); !errors.Is(err, twicestore.ErrNotFound) {
		t.Fatalf("the signal of a deleted job is left: %v", err)
	}
}

// testWaitTx: a signal in a transaction that rolls back leaves no signal
// and the job waiting; one that commits wakes it.
func testWaitTx(t *testing.T, e *env) {
	id := e.insertOne(e.job(waitKind)).ID
	e.park(e.base, "approve", time.Time{})
	for _, commit := range []bool{false, true} {
		tx := e.begin()
		res, err := tx.JobSignal(e.ctx, &twicestore.JobSignalParams{JobID: id, Name: "approve", Payload: []byte(`1`), Now: e.at(time.Second)})
		if err != nil || !res.Woke {
			t.Fatalf("JobSignal in a transaction = %+v, %v", res, err)
		}
		end := tx.Rollback
		if commit {
			end = tx.Commit
		}
		if err := end(e.ctx); err != nil {
			t.Fatal(err)
		}
		want := twicetype.JobStateWaiting
		if commit {
			want = twicetype.JobStateAvailable
		}
		if st := e.get(id).State; st != want {
			t.Fatalf("after the transaction (commit %v) the job is %s, want %s", commit, st, want)
		}
	}
}

// testWaitUnique: a waiting job holds its unique key as a running one
// does.
func testWaitUnique(t *testing.T, e *env) {
	p := e.job(waitKind)
	p.UniqueKey = "order-1"
	id := e.insertOne(p).ID
	e.park(e.base, "approve", time.Time{})
	dup := e.job(waitKind)
	dup.UniqueKey = "order-1"
	res := e.insert(dup)[0]
	if !res.Duplicate || res.Job.ID != id {
		t.Fatalf("insert of a key a waiting job holds = duplicate %v, job %d; want the waiting job %d", res.Duplicate, res.Job.ID, id)
	}
}
