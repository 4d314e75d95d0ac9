package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// On SQLite a transaction holds the database's only write lock, so these
// checks only read through the store while a transaction is open.
var txTests = []test{
	{"RollbackLeavesNoJob", testTxRollback},
	{"CommitMakesJobVisible", testTxCommit},
	{"ExecutorFromUnwrappedTx", testTxExecutorFromTx},
	{"ExecutorFromWrongType", testTxWrongType},
	{"FinishAndClaimRollBackTogether", testTxFinishRollback},
}

func (e *env) begin() twicestore.Tx {
	e.t.Helper()
	tx, err := e.s.Begin(e.ctx)
	if err != nil {
		e.t.Fatalf("Begin: %v", err)
	}
	// The test context is cancelled before cleanups run.
	e.t.Cleanup(func() { _ = tx.Rollback(context.Background()) }) // after Commit, a no-op error
	return tx
}

// checkNotFound fails unless the job with id is invisible to the store.
func (e *env) checkNotFound(what string, id int64) {
	e.t.Helper()
	_, err := e.s.JobGet(e.ctx, &twicestore.JobGetParams{ID: id})
	if !errors.Is(err, twicestore.ErrNotFound) {
		e.t.Fatalf("%s: JobGet(%d) error = %v, want ErrNotFound", what, id, err)
	}
}

func testTxRollback(t *testing.T, e *env) {
	tx := e.begin()
	res := insertWith(t, e.ctx, tx, e.job("storetest.tx.v1"), e.job("storetest.tx.v1"))
	id := res[0].Job.ID
	if _, err := tx.JobGet(e.ctx, &twicestore.JobGetParams{ID: id}); err != nil {
		t.Fatalf("the transaction cannot see its own job: %v", err)
	}
	e.checkNotFound("before commit", id)
	if err := tx.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.checkNotFound("after rollback", id)
	e.checkNotFound("after rollback", res[1].Job.ID)
}

func testTxCommit(t *testing.T, e *env) {
	tx := e.begin()
	j := insertWith(t, e.ctx, tx, e.job("storetest.tx.v1"))[0].Job
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	checkJob(t, "committed job", e.get(j.ID), j)
}

func testTxExecutorFromTx(t *testing.T, e *env) {
	for _, commit := range []bool{false, true} {
		tx := e.begin()
		ex, err := e.s.ExecutorFromTx(tx.Unwrap())
		if err != nil {
			t.Fatalf("ExecutorFromTx(%T): %v", tx.Unwrap(), err)
		}
		j := insertWith(t, e.ctx, ex, e.job("storetest.outbox.v1"))[0].Job
		if _, err := tx.JobGet(e.ctx, &twicestore.JobGetParams{ID: j.ID}); err != nil {
			t.Fatalf("the Tx cannot see the job its unwrapped transaction inserted: %v", err)
		}
		if !commit {
			if err := tx.Rollback(e.ctx); err != nil {
				t.Fatal(err)
			}
			e.checkNotFound("rolled-back outbox insert", j.ID)
			continue
		}
		if err := tx.Commit(e.ctx); err != nil {
			t.Fatal(err)
		}
		checkJob(t, "committed outbox insert", e.get(j.ID), j)
	}
}

func testTxWrongType(t *testing.T, e *env) {
	for _, v := range []any{nil, 42, "tx", struct{}{}, e.s} {
		if _, err := e.s.ExecutorFromTx(v); !errors.Is(err, twicestore.ErrWrongTx) {
			t.Errorf("ExecutorFromTx(%T) error = %v, want ErrWrongTx", v, err)
		}
	}
}

// testTxFinishRollback is the Transactional strategy's rollback: claim,
// effect and completion are one unit.
func testTxFinishRollback(t *testing.T, e *env) {
	const kind = "storetest.txfinish.v1"
	e.insertOne(e.job(kind))
	j := e.fetchOne(e.base, kind)

	tx := e.begin()
	claim, err := tx.MarkerClaim(e.ctx, &twicestore.MarkerParams{Handler: "h.tx", Key: "k", Now: e.base})
	if err != nil || claim.AlreadyProcessed {
		t.Fatalf("MarkerClaim in tx = %+v, %v", claim, err)
	}
	fin, err := tx.JobFinish(e.ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{
		{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted, FinishedAt: e.at(time.Second)},
	}})
	if err != nil || !fin.Applied[0] {
		t.Fatalf("JobFinish in tx = %+v, %v", fin, err)
	}
	if err := tx.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	if e.peek("h.tx", "k") {
		t.Error("rolled-back claim is visible")
	}
	checkJob(t, "job after rolled-back finish", e.get(j.ID), j)
}
