package twicestore

import (
	"cmp"
	"slices"
)

// FinishResults completes a bulk action's per-job results for drivers: it
// adds a JobActionNotFound result for every id of f.IDs that no result
// names, and orders them by id, as JobBulkResult documents. It also fills
// IDs with the jobs the action changed.
func FinishResults(f JobFilter, results []JobActionResult) *JobBulkResult {
	seen := make(map[int64]bool, len(results))
	for _, r := range results {
		seen[r.ID] = true
	}
	for _, id := range f.IDs {
		if !seen[id] {
			seen[id] = true
			results = append(results, JobActionResult{ID: id, Status: JobActionNotFound})
		}
	}
	slices.SortFunc(results, func(a, b JobActionResult) int { return cmp.Compare(a.ID, b.ID) })
	res := &JobBulkResult{Results: results}
	for _, r := range results {
		if r.Status == JobActionDone || r.Status == JobActionCancelRequested {
			res.IDs = append(res.IDs, r.ID)
		}
	}
	return res
}
