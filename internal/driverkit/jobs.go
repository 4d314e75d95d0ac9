package driverkit

import (
	"cmp"
	"encoding/json"
	"fmt"
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
// Before go; a zero Before keeps them all.
type FinishedCut struct {
	State  twicetype.JobState
	Before time.Time
}

// FinishedCuts lists the cuts of p in the order a JobDeleteFinished
// deletes them.
func FinishedCuts(p *twicestore.JobDeleteFinishedParams) []FinishedCut {
	return []FinishedCut{
		{twicetype.JobStateCompleted, p.CompletedBefore},
		{twicetype.JobStateDead, p.DeadBefore},
		{twicetype.JobStateDiscarded, p.DiscardedBefore},
		{twicetype.JobStateCancelled, p.CancelledBefore},
	}
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
