package twice

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twicejobs/twice/internal/logattr"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// A log line an operator reads during an incident must be true. Around a
// failover, a write can commit and still report an error (its reply was
// lost with the primary), and a job can leave its lease because this
// attempt's own write ended it. So before the runtime says a lease was
// lost, an outcome discarded or an attempt failed, it reads the job back
// and says what the job's row says.

// recheckTimeout bounds one read of a job back.
const recheckTimeout = 5 * time.Second

// readBack reads a job on a context of its own: the caller's may be
// cancelled, and the read decides only what is logged.
func readBack(store twicestore.Executor, id int64) (*twicetype.JobRow, error) {
	ctx, cancel := context.WithTimeout(context.Background(), recheckTimeout)
	defer cancel()
	return store.JobGet(ctx, &twicestore.JobGetParams{ID: id})
}

// endedUnder reports whether row left running under epoch: this attempt's
// own write ended it (or its lease expired and nobody fetched it since).
func endedUnder(row *twicetype.JobRow, epoch int64) bool {
	return row.Epoch == epoch && row.State != twicetype.JobStateRunning
}

// completedUnder reports whether row completed under epoch: only the
// attempt holding that epoch can complete a job (a rescue requeues,
// dead-letters or cancels it).
func completedUnder(row *twicetype.JobRow, epoch int64) bool {
	return row.Epoch == epoch && row.State == twicetype.JobStateCompleted
}

// outcomeRecorded reports whether row shows o as written: the job ended
// under o's epoch in o's state, with o's error last in its history.
func outcomeRecorded(row *twicetype.JobRow, o *twicestore.JobOutcome) bool {
	if !endedUnder(row, o.Epoch) || row.State != o.State {
		return false
	}
	if o.Error == nil {
		return true
	}
	n := len(row.Errors)
	return n > 0 && row.Errors[n-1].Attempt == o.Error.Attempt && row.Errors[n-1].Error == o.Error.Error
}

// recheckOutcome is the completer's answer for o, checked against the row
// when the write was not applied: a write that reported an error before
// (during a failover) may have committed, so the retry found the job no
// longer running under its lease. It returns applied when the row shows
// o, and otherwise logs what the row says and reports explained, so the
// caller logs nothing more; fenced reports that the lease fence refused
// the outcome (the job left this attempt's lease without it). A write that
// failed for good (err) is not read back: the database was unreachable for
// the lease's length.
func (e *execution) recheckOutcome(o *twicestore.JobOutcome, applied bool, err error) (recorded, explained, fenced bool) {
	if applied || err != nil {
		return applied && err == nil, false, false
	}
	if e.leaseLost {
		return false, false, true
	}
	logger := e.logger.With(logattr.Component, "completer", "epoch", o.Epoch)
	row, rerr := readBack(e.x.store, o.ID)
	switch {
	case rerr != nil:
		logger.Warn("job outcome not written: the job was no longer running under this attempt's lease, "+
			"and reading it back failed", logattr.Err, rerr)
		return false, true, true
	case outcomeRecorded(row, o):
		logger.Info("job outcome recorded: an earlier write of it reported an error but had committed", "state", o.State)
		return true, true, false
	case completedUnder(row, o.Epoch):
		logger.Info("job completed: a write of this attempt reported an error but had committed; "+
			"the later outcome was not written", "outcome", o.State)
		return false, true, false
	case endedUnder(row, o.Epoch):
		logger.Warn("job outcome not written: the job had already left this attempt's lease", "state_now", row.State)
		return false, true, true
	}
	return false, false, true // a newer epoch holds it: the lease was lost, as the caller says
}

// committedAnyway reads the job back after its transaction's Commit
// reported an error: a commit that reached the database (a failover's
// standby) before its reply was lost completed the job, and the attempt
// must not be logged as failed. It reads again for a while, as the
// database may be coming back; unknown means it could not tell.
func (e *execution) committedAnyway(commitErr error) (committed bool, err error) {
	wait := 100 * time.Millisecond
	deadline := time.Now().Add(outcomeWriteTimeout)
	for {
		row, rerr := readBack(e.x.store, e.row.ID)
		switch {
		case rerr == nil && completedUnder(row, e.row.Epoch):
			e.logger.Info("job completed: its transaction's commit reported an error but had committed",
				logattr.Component, "executor", logattr.Err, commitErr)
			return true, nil
		case rerr == nil || errors.Is(rerr, twicestore.ErrNotFound):
			return false, fmt.Errorf("commit: %w", commitErr)
		case time.Now().Add(wait).After(deadline):
			return false, fmt.Errorf("commit: %w (whether it committed is unknown: reading the job back failed: %w)", commitErr, rerr)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-e.x.workCtx.Done(): // the shutdown's grace ran out
			t.Stop()
			return false, fmt.Errorf("commit: %w (whether it committed is unknown: reading the job back failed: %w)", commitErr, rerr)
		}
		wait = min(2*wait, time.Second)
	}
}

// returned marks row's handler as returned, its outcome handed to the
// completer: its lease is still extended until the outcome is written,
// but a lease the store no longer extends then is no news (the outcome
// may have committed already) and its handler has nothing to cancel.
func (r *runningJobs) returned(row *twicetype.JobRow) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if j, ok := r.jobs[leaseOf(row)]; ok {
		j.returned = true
	}
}
