package driverkit

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// FinishResults completes a bulk action's per-job results for drivers: it
// adds a twicestore.JobActionNotFound result for every id of f.IDs that no result
// names, and orders them by id, as JobBulkResult documents. It also fills
// IDs with the jobs the action changed.
func FinishResults(f twicestore.JobFilter, results []twicestore.JobActionResult) *twicestore.JobBulkResult {
	seen := make(map[int64]bool, len(results))
	for _, r := range results {
		seen[r.ID] = true
	}
	for _, id := range f.IDs {
		if !seen[id] {
			seen[id] = true
			results = append(results, twicestore.JobActionResult{ID: id, Status: twicestore.JobActionNotFound})
		}
	}
	slices.SortFunc(results, func(a, b twicestore.JobActionResult) int { return cmp.Compare(a.ID, b.ID) })
	res := &twicestore.JobBulkResult{Results: results}
	for _, r := range results {
		if r.Status == twicestore.JobActionDone || r.Status == twicestore.JobActionCancelRequested {
			res.IDs = append(res.IDs, r.ID)
		}
	}
	return res
}

// DeleteFinishedWindow is how many of a state's oldest rows (by id) one
// JobDeleteFinished batch of limit rows looks at. Drivers bound the search
// so that a round finding nothing old enough stays cheap however long the
// history is; since ids grow with time, the oldest rows are the ones due
// first.
func DeleteFinishedWindow(limit int) int { return 10 * limit }

// FinishedCut is one state's retention cut: its finished jobs older than
// Before and of ids above After go; a zero Before keeps them all.
type FinishedCut struct {
	State  twicetype.JobState
	Before time.Time
	After  int64
}

// FinishedCuts lists the cuts of p in the order a JobDeleteFinished
// deletes them.
func FinishedCuts(p *twicestore.JobDeleteFinishedParams) []FinishedCut {
	cuts := []FinishedCut{
		{State: twicetype.JobStateCompleted, Before: p.CompletedBefore},
		{State: twicetype.JobStateDead, Before: p.DeadBefore},
		{State: twicetype.JobStateDiscarded, Before: p.DiscardedBefore},
		{State: twicetype.JobStateCancelled, Before: p.CancelledBefore},
	}
	for i := range cuts {
		cuts[i].After = p.After[cuts[i].State]
	}
	return cuts
}

// DeleteFinished runs a JobDeleteFinished batch with a driver's delete of
// one cut's jobs, which deletes at most limit of them, lowest ids first,
// and returns how many it deleted and the highest id among them.
func DeleteFinished(p *twicestore.JobDeleteFinishedParams, del func(c FinishedCut, limit int) (deleted int, last int64, err error)) (*twicestore.JobDeleteFinishedResult, error) {
	res := &twicestore.JobDeleteFinishedResult{After: maps.Clone(p.After)}
	for _, c := range FinishedCuts(p) {
		left := p.Limit - res.Deleted
		if c.Before.IsZero() || left <= 0 {
			continue
		}
		n, last, err := del(c, left)
		if err != nil {
			return nil, fmt.Errorf("delete finished %s jobs: %w", c.State, err)
		}
		res.Deleted += n
		if n > 0 {
			if res.After == nil {
				res.After = map[twicetype.JobState]int64{}
			}
			res.After[c.State] = last
		}
	}
	return res, nil
}

// DecodeJobJSON completes a scanned job row: its args are never nil, and
// its error history and metadata, read as JSON text (errs, meta), are
// decoded.
func DecodeJobJSON(j *twicetype.JobRow, errs, meta string) error {
	if j.Args == nil {
		j.Args = []byte{}
	}
	if errs != "" && errs != "[]" {
		if err := json.Unmarshal([]byte(errs), &j.Errors); err != nil {
			return fmt.Errorf("job %d: decode error history: %w", j.ID, err)
		}
	}
	if meta != "" && meta != "{}" {
		if err := json.Unmarshal([]byte(meta), &j.Metadata); err != nil {
			return fmt.Errorf("job %d: decode metadata: %w", j.ID, err)
		}
	}
	return nil
}

// ScanJobCount reads a row of (state, queue, kind, count).
func ScanJobCount(s dbrows.Scanner) (twicestore.JobCount, error) {
	var (
		c     twicestore.JobCount
		state string
	)
	err := s.Scan(&state, &c.Queue, &c.Kind, &c.Count)
	c.State = twicetype.JobState(state)
	return c, err
}

// RescueResult is JobRescue's answer from the rows its statement
// returned: the jobs in id order, and their ids by what became of them.
func RescueResult(jobs []*twicetype.JobRow) *twicestore.JobRescueResult {
	slices.SortFunc(jobs, func(a, b *twicetype.JobRow) int { return cmp.Compare(a.ID, b.ID) })
	res := &twicestore.JobRescueResult{Jobs: jobs}
	for _, j := range jobs {
		switch j.State {
		case twicetype.JobStateDead:
			res.Dead = append(res.Dead, j.ID)
		case twicetype.JobStateCancelled:
			res.Cancelled = append(res.Cancelled, j.ID)
		default:
			res.Requeued = append(res.Requeued, j.ID)
		}
	}
	return res
}

// RetryTakes reports whether JobRetry takes a job in state: dead,
// discarded and cancelled always; completed only when the caller asked for
// completed jobs (JobBulkParams.Completed) and the job is no workflow task
// or batch member (composed), whose completion fired its edges already.
func RetryTakes(state twicetype.JobState, completed, composed bool) bool {
	switch state {
	case twicetype.JobStateDead, twicetype.JobStateDiscarded, twicetype.JobStateCancelled:
		return true
	case twicetype.JobStateCompleted:
		return completed && !composed
	}
	return false
}

// RetryStatus is JobRetry's verdict on one matched job: retried; taken but
// not retried, so its unique key was held; a completed workflow task or
// batch member asked for (JobActionComposed); or a state a retry does not
// take.
func RetryStatus(state twicetype.JobState, completed, composed, retried bool) twicestore.JobActionStatus {
	switch {
	case retried:
		return twicestore.JobActionDone
	case RetryTakes(state, completed, composed):
		return twicestore.JobActionConflict
	case completed && composed && state == twicetype.JobStateCompleted:
		return twicestore.JobActionComposed
	}
	return twicestore.JobActionWrongState
}

// ReplayJobRow reads one row of a retry preview's query, whose columns
// are, in order: id, kind, state, unique_key, workflow_id, workflow_task,
// batch_id, the marker found, the marker's job id, the steps claimed
// without a receipt, those with one, and the unique key's holder.
func ReplayJobRow(s dbrows.Scanner) (twicestore.ReplayJob, error) {
	var (
		j          twicestore.ReplayJob
		state      string
		open, done int64
	)
	err := s.Scan(&j.ID, &j.Kind, &state, &j.UniqueKey, &j.WorkflowID, &j.WorkflowTask, &j.BatchID,
		&j.Marker, &j.MarkerJobID, &open, &done, &j.HolderID)
	j.State, j.StepsOpen, j.StepsDone = twicetype.JobState(state), int(open), int(done)
	return j, err
}

// JobColumnNames are the columns of twice_jobs that ScanJob reads, in its
// order.
var JobColumnNames = []string{"id", "kind", "queue", "priority", "args", "message_id", "idempotency_key",
	"correlation_id", "unique_key", "state", "attempt", "max_attempts", "epoch", "run_at", "lease_until",
	"attempted_by", "errors", "note", "created_at", "finished_at", "metadata",
	"cancel_requested_at", "cancel_by", "cancel_reason", "snoozes", "trace", "wait_name", "signal_seq"}

// ScanJob reads one row of JobColumnNames (errors and metadata as JSON
// text), after the extra destinations a query puts before them; its times
// are read as tm says.
func ScanJob[T, N any](tm Times[T, N], r dbrows.Scanner, extra ...any) (*twicetype.JobRow, error) {
	var (
		j                      twicetype.JobRow
		state, errs, meta      string
		runAt, createdAt       T
		leaseUntil, finishedAt N
		cancelAt               N
		cancelBy, cancelReason string
	)
	dest := append(extra, &j.ID, &j.Kind, &j.Queue, &j.Priority, &j.Args, &j.MessageID, &j.Key, &j.CorrelationID,
		&j.UniqueKey, &state, &j.Attempt, &j.MaxAttempts, &j.Epoch, &runAt, &leaseUntil, &j.AttemptedBy,
		&errs, &j.Note, &createdAt, &finishedAt, &meta, &cancelAt, &cancelBy, &cancelReason, &j.Snoozes, &j.Trace,
		&j.WaitName, &j.SignalSeq)
	if err := r.Scan(dest...); err != nil {
		return nil, err
	}
	if at := tm.Null(cancelAt); !at.IsZero() {
		j.Cancel = &twicetype.CancelRequest{At: at, By: cancelBy, Reason: cancelReason}
	}
	j.State = twicetype.JobState(state)
	j.RunAt, j.CreatedAt = tm.At(runAt), tm.At(createdAt)
	j.LeaseUntil, j.FinishedAt = tm.Null(leaseUntil), tm.Null(finishedAt)
	if err := DecodeJobJSON(&j, errs, meta); err != nil {
		return nil, err
	}
	return &j, nil
}

// MatchedJob is what a bulk action needs of a job its filter matched.
type MatchedJob struct {
	ID          int64
	State       twicetype.JobState
	Kind        string
	UniqueKey   string
	CancelAsked bool
	// Composed: a workflow task's job or a batch member.
	Composed bool
}

// MatchedJobColumns are the columns of twice_jobs that ScanMatchedJob
// reads, in its order.
const MatchedJobColumns = `id, state, kind, unique_key, cancel_requested_at IS NOT NULL,
	workflow_id IS NOT NULL OR batch_id IS NOT NULL`

// ScanMatchedJob reads one row of MatchedJobColumns.
func ScanMatchedJob(r dbrows.Scanner) (MatchedJob, error) {
	var (
		j     MatchedJob
		state string
	)
	err := r.Scan(&j.ID, &state, &j.Kind, &j.UniqueKey, &j.CancelAsked, &j.Composed)
	j.State = twicetype.JobState(state)
	return j, err
}
