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

var stepTests = []test{
	{"ClaimCompleteGet", testStepClaimComplete},
	{"ClaimDoneAtOnce", testStepClaimDone},
	{"FencedByEpoch", testStepFenced},
	{"ReleaseThenClaim", testStepRelease},
	{"ConcurrentClaimsOneWinner", testStepConcurrent},
	{"ReceiptCapped", testStepReceiptCap},
	{"InTransaction", testStepInTx},
	{"Prune", testStepPrune},
	{"SettleByHand", testStepSettle},
	{"SettleRefusedWhileRunning", testStepSettleRunning},
	{"UnstorableRefused", testStepUnstorable},
	{"OutputWithCompletion", testJobOutput},
	{"List", testStepList},
}

// step returns the params of step name for a running job.
func stepOf(j *twicetype.JobRow, name string) *twicestore.StepParams {
	return &twicestore.StepParams{Handler: "h.order", Key: j.Key, Step: name, Strategy: "claim-before", JobID: j.ID, Epoch: j.Epoch}
}

// testStepClaimComplete: a claim is unfinished until its receipt is
// stored; a second claim of the step, by any delivery, finds it.
func testStepClaimComplete(t *testing.T, e *env) {
	j := e.fetchOne(e.base, e.insertOne(e.job("k")).Kind)
	p := stepOf(j, "charge")
	p.Now = e.base
	if _, err := e.s.StepGet(e.ctx, p); !errors.Is(err, twicestore.ErrNotFound) {
		t.Fatalf("StepGet of an unclaimed step: %v, want ErrNotFound", err)
	}
	res, err := e.s.StepClaim(e.ctx, p)
	if err != nil || !res.Claimed || res.Existing != nil {
		t.Fatalf("first claim = %+v, %v; want Claimed", res, err)
	}
	got, err := e.s.StepGet(e.ctx, p)
	if err != nil || got.Done() || got.Receipt != nil || got.JobID != j.ID || got.Epoch != j.Epoch ||
		got.Strategy != "claim-before" || !got.ClaimedAt.Equal(e.base) {
		t.Fatalf("claimed step = %+v, %v", got, err)
	}
	done := *p
	done.Receipt, done.Now = []byte(`{"charge":"ch_1"}`), e.at(time.Second)
	if err := e.s.StepComplete(e.ctx, &done); err != nil {
		t.Fatalf("StepComplete: %v", err)
	}
	if err := e.s.StepComplete(e.ctx, &done); !errors.Is(err, twicestore.ErrNotFound) {
		t.Fatalf("second StepComplete: %v, want ErrNotFound (no unfinished claim)", err)
	}
	res, err = e.s.StepClaim(e.ctx, p)
	if err != nil || res.Claimed || res.Existing == nil || !res.Existing.Done() ||
		string(res.Existing.Receipt) != `{"charge":"ch_1"}` || !res.Existing.DoneAt.Equal(e.at(time.Second)) {
		t.Fatalf("claim of a done step = %+v (%+v), %v; want the done step with its receipt", res, res.Existing, err)
	}
	// Another step of the same job, and the same step of another key, are
	// their own.
	if res, err := e.s.StepClaim(e.ctx, stepOf(j, "email")); err != nil || !res.Claimed {
		t.Fatalf("claim of another step = %+v, %v", res, err)
	}
}

// testStepClaimDone: a claim-after step is claimed done, with its receipt,
// in one write.
func testStepClaimDone(t *testing.T, e *env) {
	j := e.fetchOne(e.base, e.insertOne(e.job("k")).Kind)
	p := stepOf(j, "email")
	p.Strategy, p.Done, p.Receipt = "claim-after", true, []byte(`"msg-7"`)
	if res, err := e.s.StepClaim(e.ctx, p); err != nil || !res.Claimed {
		t.Fatalf("claim = %+v, %v", res, err)
	}
	got, err := e.s.StepGet(e.ctx, p)
	if err != nil || !got.Done() || string(got.Receipt) != `"msg-7"` || got.Strategy != "claim-after" {
		t.Fatalf("step = %+v, %v; want done with its receipt", got, err)
	}
}

// testStepFenced: a delivery whose lease moved on writes no step: not a
// claim, not a receipt, not a release.
func testStepFenced(t *testing.T, e *env) {
	j := e.fetchOne(e.base, e.insertOne(e.job("k")).Kind)
	p := stepOf(j, "charge")
	if _, err := e.s.StepClaim(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	stale := *p
	stale.Epoch = j.Epoch + 1 // not the job's epoch
	if res, err := e.s.StepClaim(e.ctx, &stale); err != nil || res.Claimed || res.Existing == nil || res.Existing.Epoch != j.Epoch {
		t.Fatalf("claim of an existing step under a wrong epoch = %+v, %v; want the existing claim, nothing written", res, err)
	}
	stale.Step = "refund"
	if _, err := e.s.StepClaim(e.ctx, &stale); !errors.Is(err, twicestore.ErrFenced) {
		t.Fatalf("claim of a new step under a wrong epoch: %v, want ErrFenced", err)
	}
	// The lease expires and the job is rescued: the old holder is stale.
	e.rescue(j.LeaseUntil.Add(time.Second), 0)
	if err := e.s.StepComplete(e.ctx, p); !errors.Is(err, twicestore.ErrFenced) {
		t.Fatalf("complete after a rescue: %v, want ErrFenced", err)
	}
	if err := e.s.StepRelease(e.ctx, p); !errors.Is(err, twicestore.ErrFenced) {
		t.Fatalf("release after a rescue: %v, want ErrFenced", err)
	}
	other := stepOf(j, "email")
	if _, err := e.s.StepClaim(e.ctx, other); !errors.Is(err, twicestore.ErrFenced) {
		t.Fatalf("claim after a rescue: %v, want ErrFenced", err)
	}
	if got, err := e.s.StepGet(e.ctx, p); err != nil || got.Done() {
		t.Fatalf("the stale claim = %+v, %v; want it unfinished, as it was", got, err)
	}
	// The new holder sees the old claim, unfinished: its effect is uncertain.
	j2 := e.fetchOne(j.LeaseUntil.Add(2*time.Second), j.Kind)
	res, err := e.s.StepClaim(e.ctx, stepOf(j2, "charge"))
	if err != nil || res.Claimed || res.Existing == nil || res.Existing.Done() || res.Existing.Epoch != j.Epoch {
		t.Fatalf("new holder's claim = %+v, %v; want the old unfinished claim", res, err)
	}
	// A write without a fence is refused outright.
	if _, err := e.s.StepClaim(e.ctx, &twicestore.StepParams{Handler: "h", Step: "s"}); err == nil ||
		!strings.Contains(err.Error(), "epoch") {
		t.Fatalf("claim without job and epoch: %v, want an error naming the fence", err)
	}
}

// testStepRelease: a released claim can be claimed again; a done step is
// never released.
func testStepRelease(t *testing.T, e *env) {
	j := e.fetchOne(e.base, e.insertOne(e.job("k")).Kind)
	p := stepOf(j, "charge")
	if _, err := e.s.StepClaim(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := e.s.StepRelease(e.ctx, p); err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := e.s.StepRelease(e.ctx, p); err != nil {
		t.Fatalf("release of an unclaimed step: %v", err)
	}
	if res, err := e.s.StepClaim(e.ctx, p); err != nil || !res.Claimed {
		t.Fatalf("claim after release = %+v, %v", res, err)
	}
	p.Receipt = []byte(`1`)
	if err := e.s.StepComplete(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := e.s.StepRelease(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	if got, err := e.s.StepGet(e.ctx, p); err != nil || !got.Done() {
		t.Fatalf("done step after a release = %+v, %v; want it kept", got, err)
	}
}

// testStepConcurrent: of many claims of one step at once, one wins.
func testStepConcurrent(t *testing.T, e *env) {
	j := e.fetchOne(e.base, e.insertOne(e.job("k")).Kind)
	const n = 8
	var wg sync.WaitGroup
	won := make(chan bool, n)
	for range n {
		wg.Go(func() {
			res, err := e.s.StepClaim(e.ctx, stepOf(j, "charge"))
			if err != nil {
				t.Errorf("claim: %v", err)
				return
			}
			won <- res.Claimed
		})
	}
	wg.Wait()
	close(won)
	wins := 0
	for w := range won {
		if w {
			wins++
		}
	}
	if wins != 1 {
		t.Fatalf("%d claims won, want 1", wins)
	}
}

// testStepReceiptCap: a receipt over MaxReceiptBytes is refused with
// ErrReceiptTooLarge and nothing is written.
func testStepReceiptCap(t *testing.T, e *env) {
	j := e.fetchOne(e.base, e.insertOne(e.job("k")).Kind)
	p := stepOf(j, "charge")
	p.Done, p.Receipt = true, []byte(`"`+strings.Repeat("x", twicestore.MaxReceiptBytes)+`"`)
	if _, err := e.s.StepClaim(e.ctx, p); !errors.Is(err, twicestore.ErrReceiptTooLarge) {
		t.Fatalf("oversized receipt: %v, want ErrReceiptTooLarge", err)
	}
	if _, err := e.s.StepGet(e.ctx, p); !errors.Is(err, twicestore.ErrNotFound) {
		t.Fatalf("after a refused claim: %v, want no step", err)
	}
}

// testStepInTx: a step claimed and completed in a transaction exists only
// if the transaction commits.
func testStepInTx(t *testing.T, e *env) {
	j := e.fetchOne(e.base, e.insertOne(e.job("k")).Kind)
	p := stepOf(j, "ledger")
	p.Strategy = "transactional"
	for _, commit := range []bool{false, true} {
		tx, err := e.s.Begin(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := tx.StepClaim(e.ctx, p); err != nil || !res.Claimed {
			t.Fatalf("claim in tx = %+v, %v", res, err)
		}
		done := *p
		done.Receipt = []byte(`{"row":1}`)
		if err := tx.StepComplete(e.ctx, &done); err != nil {
			t.Fatalf("complete in tx: %v", err)
		}
		if commit {
			err = tx.Commit(e.ctx)
		} else {
			err = tx.Rollback(e.ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.s.StepGet(e.ctx, p)
		switch {
		case !commit && !errors.Is(err, twicestore.ErrNotFound):
			t.Fatalf("after rollback: %+v, %v; want no step", got, err)
		case commit && (err != nil || !got.Done() || string(got.Receipt) != `{"row":1}`):
			t.Fatalf("after commit: %+v, %v; want the done step", got, err)
		}
	}
}

// testStepPrune: old steps are pruned, oldest first, up to the limit.
func testStepPrune(t *testing.T, e *env) {
	j := e.fetchOne(e.base, e.insertOne(e.job("k")).Kind)
	for i, name := range []string{"a", "b", "c"} {
		p := stepOf(j, name)
		p.Now = e.at(time.Duration(i) * time.Minute)
		if _, err := e.s.StepClaim(e.ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	res, err := e.s.StepPrune(e.ctx, &twicestore.MarkerPruneParams{Before: e.at(90 * time.Second), Limit: 1})
	if err != nil || res.Deleted != 1 || !res.From.Equal(e.base) {
		t.Fatalf("prune = %+v, %v; want 1 deleted and the cursor at its claim, %s", res, err, e.base)
	}
	if _, err := e.s.StepGet(e.ctx, stepOf(j, "a")); !errors.Is(err, twicestore.ErrNotFound) {
		t.Fatalf("oldest step after prune: %v, want ErrNotFound", err)
	}
	if _, err := e.s.StepGet(e.ctx, stepOf(j, "c")); err != nil {
		t.Fatalf("newest step after prune: %v, want it kept", err)
	}
	// The next batch of the pass starts at the cursor: b, claimed after it.
	next, err := e.s.StepPrune(e.ctx, &twicestore.MarkerPruneParams{Before: e.at(90 * time.Second), Limit: 10, From: res.From})
	if err != nil || next.Deleted != 1 || !next.From.Equal(e.at(time.Minute)) {
		t.Fatalf("next batch = %+v, %v; want b deleted and the cursor at its claim, %s", next, err, e.at(time.Minute))
	}
	// A step claimed before the cursor waits for the next pass.
	p := stepOf(j, "early")
	p.Now = e.at(-time.Minute)
	if _, err := e.s.StepClaim(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	if again, err := e.s.StepPrune(e.ctx, &twicestore.MarkerPruneParams{Before: e.at(90 * time.Second), Limit: 10, From: next.From}); err != nil || again.Deleted != 0 {
		t.Fatalf("a batch from the cursor = %+v, %v; want the step before it left to the next pass", again, err)
	}
	if pass, err := e.s.StepPrune(e.ctx, &twicestore.MarkerPruneParams{Before: e.at(90 * time.Second), Limit: 10}); err != nil || pass.Deleted != 1 {
		t.Fatalf("a new pass = %+v, %v; want the early step deleted", pass, err)
	}
}

// testJobOutput: a completed outcome's output is stored in the same write;
// other outcomes and stale holders store none.
func testJobOutput(t *testing.T, e *env) {
	j := e.fetchOne(e.base, e.insertOne(e.job("k")).Kind)
	got, err := e.s.JobOutput(e.ctx, &twicestore.JobGetParams{ID: j.ID})
	if err != nil || got.State != twicetype.JobStateRunning || got.Output != nil {
		t.Fatalf("output of a running job = %+v, %v", got, err)
	}
	// A retry's output is not kept; its error is reported.
	e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateAvailable, RunAt: e.base,
		Error: &twicetype.AttemptError{Attempt: 1, At: e.base, Error: "boom"}, Output: []byte(`"no"`)})
	got, err = e.s.JobOutput(e.ctx, &twicestore.JobGetParams{ID: j.ID})
	if err != nil || got.State != twicetype.JobStateAvailable || got.Output != nil || got.Error != "boom" {
		t.Fatalf("output after a retry = %+v, %v; want none and error boom", got, err)
	}
	j = e.fetchOne(e.base, j.Kind)
	applied := e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch - 1, State: twicetype.JobStateCompleted,
		FinishedAt: e.base, Output: []byte(`"stale"`)})
	if applied[0] {
		t.Fatal("a stale outcome applied")
	}
	e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted, FinishedAt: e.base,
		Output: []byte(`{"total":42}`)})
	got, err = e.s.JobOutput(e.ctx, &twicestore.JobGetParams{ID: j.ID})
	if err != nil || got.State != twicetype.JobStateCompleted || string(got.Output) != `{"total":42}` {
		t.Fatalf("output of the completed job = %+v (%s), %v", got, got.Output, err)
	}
	if _, err := e.s.JobOutput(e.ctx, &twicestore.JobGetParams{ID: j.ID + 1000}); !errors.Is(err, twicestore.ErrNotFound) {
		t.Fatalf("output of no job: %v, want ErrNotFound", err)
	}
}

// testStepSettle: a person settles an unfinished claim without a fence,
// as done with a receipt or as not applied (deleted); a done step is not
// settled again.
func testStepSettle(t *testing.T, e *env) {
	j := e.fetchOne(e.base, e.insertOne(e.job("k")).Kind)
	for _, name := range []string{"charge", "refund"} {
		if _, err := e.s.StepClaim(e.ctx, stepOf(j, name)); err != nil {
			t.Fatal(err)
		}
	}
	e.rescue(j.LeaseUntil.Add(time.Second), 0) // the claimant is gone
	done := &twicestore.StepParams{Handler: "h.order", Key: j.Key, Step: "charge", Receipt: []byte(`"ch_9"`), Now: e.base}
	if err := e.s.StepSettle(e.ctx, done); err != nil {
		t.Fatalf("settle as done: %v", err)
	}
	if got, err := e.s.StepGet(e.ctx, done); err != nil || !got.Done() || string(got.Receipt) != `"ch_9"` {
		t.Fatalf("settled step = %+v, %v; want done with the receipt", got, err)
	}
	if err := e.s.StepSettle(e.ctx, done); !errors.Is(err, twicestore.ErrNotFound) {
		t.Fatalf("settling a done step: %v, want ErrNotFound", err)
	}
	gone := &twicestore.StepParams{Handler: "h.order", Key: j.Key, Step: "refund"}
	if err := e.s.StepSettle(e.ctx, gone); err != nil {
		t.Fatalf("settle as not applied: %v", err)
	}
	if _, err := e.s.StepGet(e.ctx, gone); !errors.Is(err, twicestore.ErrNotFound) {
		t.Fatalf("step settled as not applied: %v, want it deleted", err)
	}
}

// testStepSettleRunning: the claim of a step whose job is running (its
// delivery may be running the effect right now) is not settled, either
// way: StepSettle fails with ErrStepRunning and the claim stays as it was.
// Once the job is no longer running, it is.
func testStepSettleRunning(t *testing.T, e *env) {
	j := e.fetchOne(e.base, e.insertOne(e.job("k")).Kind)
	if _, err := e.s.StepClaim(e.ctx, stepOf(j, "charge")); err != nil {
		t.Fatal(err)
	}
	done := &twicestore.StepParams{Handler: "h.order", Key: j.Key, Step: "charge", Receipt: []byte(`"ch_9"`), Now: e.base}
	gone := &twicestore.StepParams{Handler: "h.order", Key: j.Key, Step: "charge"}
	for _, p := range []*twicestore.StepParams{done, gone} {
		if err := e.s.StepSettle(e.ctx, p); !errors.Is(err, twicestore.ErrStepRunning) {
			t.Fatalf("settle (receipt %q) while the job runs: %v, want ErrStepRunning", p.Receipt, err)
		}
	}
	if got, err := e.s.StepGet(e.ctx, done); err != nil || got.Done() || got.JobID != j.ID {
		t.Fatalf("claim after refused settles = %+v, %v; want it unfinished, as it was", got, err)
	}
	e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateDead, FinishedAt: e.base,
		Error: &twicetype.AttemptError{Attempt: 1, At: e.base, Error: "effect uncertain"}})
	if err := e.s.StepSettle(e.ctx, done); err != nil {
		t.Fatalf("settle once the job is dead: %v", err)
	}
}

// testStepUnstorable: a step write holding a value no driver can store
// as text (a NUL byte, bytes that are not UTF-8) is refused with
// ErrUnstorable on every driver, writing nothing, so both drivers behave
// the same (SQLite would store the bytes, PostgreSQL refuses them).
func testStepUnstorable(t *testing.T, e *env) {
	j := e.fetchOne(e.base, e.insertOne(e.job("k")).Kind)
	bad := []*twicestore.StepParams{stepOf(j, "charge\x00"), stepOf(j, "charge\xff")}
	withReceipt := stepOf(j, "email")
	withReceipt.Done, withReceipt.Receipt = true, []byte("\"caf\xe9\"")
	bad = append(bad, withReceipt)
	for _, p := range bad {
		if _, err := e.s.StepClaim(e.ctx, p); !errors.Is(err, twicestore.ErrUnstorable) {
			t.Errorf("claim of step %q (receipt %q): %v, want ErrUnstorable", p.Step, p.Receipt, err)
		}
		if err := e.s.StepSettle(e.ctx, p); !errors.Is(err, twicestore.ErrUnstorable) {
			t.Errorf("settle of step %q (receipt %q): %v, want ErrUnstorable", p.Step, p.Receipt, err)
		}
	}
	if _, err := e.s.StepGet(e.ctx, withReceipt); !errors.Is(err, twicestore.ErrNotFound) {
		t.Errorf("after a refused claim: %v, want no step", err)
	}
}
