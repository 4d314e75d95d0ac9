package twicepg

import (
	"context"
	"fmt"

	"github.com/twicejobs/twice/twicestore"
)

const cancelRequestedSQL = `SELECT j.id FROM twice_jobs AS j
JOIN unnest($1::bigint[], $2::bigint[]) AS l(id, epoch) ON j.id = l.id
WHERE j.epoch = l.epoch AND j.state = 'running' AND j.cancel_requested_at IS NOT NULL`

// JobCancelRequested reads, without writing or locking, which of the
// leases still running under their epoch carry a cancel request. Workers
// on PostgreSQL learn of cancels from ListenCancels; this is the seam's
// poll for stores without it.
func (e *executor) JobCancelRequested(ctx context.Context, p *twicestore.JobCancelRequestedParams) (*twicestore.JobCancelRequestedResult, error) {
	res := &twicestore.JobCancelRequestedResult{}
	if len(p.Leases) == 0 {
		return res, nil
	}
	ids, epochs := make([]int64, len(p.Leases)), make([]int64, len(p.Leases))
	for i, l := range p.Leases {
		ids[i], epochs[i] = l.ID, l.Epoch
	}
	got, err := queryIDs(ctx, e.q, cancelRequestedSQL, ids, epochs)
	if err != nil {
		return nil, fmt.Errorf("read cancel requests: %w", err)
	}
	res.IDs = got
	return res, nil
}
