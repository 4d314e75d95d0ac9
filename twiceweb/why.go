package twiceweb

import (
	"context"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicetype"
)

// Why a job is not running, as the dashboard shows it: beside its state in
// the jobs list, on its page, and as "waiting_because" in the API's job
// objects. The reasons are twice.Client.JobWaitReasons', read once per
// page of jobs.

// waitReasons says why each of jobs that waits does, by id.
func (h *Handler) waitReasons(ctx context.Context, jobs []*twicetype.JobRow) (map[int64]*twice.WaitReason, error) {
	reasons, err := h.client.JobWaitReasons(ctx, jobs)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]*twice.WaitReason, len(jobs))
	for i, j := range jobs {
		if reasons[i] != nil {
			out[j.ID] = reasons[i]
		}
	}
	return out, nil
}
