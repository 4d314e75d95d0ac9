package twicemysql

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/twicestore"
)

// JobCancelRequested reads, without writing or locking, which of the
// leases still running under their epoch carry a cancel request: the
// worker's cancel poll (MySQL has no notifications to push them).
func (e *executor) JobCancelRequested(ctx context.Context, p *twicestore.JobCancelRequestedParams) (*twicestore.JobCancelRequestedResult, error) {
	res := &twicestore.JobCancelRequestedResult{}
	if len(p.Leases) == 0 {
		return res, nil
	}
	ids := make([]int64, len(p.Leases))
	pairs := make([]string, len(p.Leases))
	var pairArgs []any
	for i, l := range p.Leases {
		ids[i] = l.ID
		pairs[i] = "(?, ?)"
		pairArgs = append(pairArgs, l.ID, l.Epoch)
	}
	// The id list keeps each lease a primary-key lookup; the pairs check
	// the epochs.
	idList, args := in(ids)
	rows, err := e.db.QueryContext(ctx, `SELECT id FROM twice_jobs
		WHERE id IN `+idList+` AND (id, epoch) IN (`+strings.Join(pairs, ", ")+`)
			AND state = 'running' AND cancel_requested_at IS NOT NULL`, append(args, pairArgs...)...)
	if err != nil {
		return nil, fmt.Errorf("read cancel requests: %w", err)
	}
	res.IDs, err = dbrows.Collect(rows, dbrows.One[int64])
	if err != nil {
		return nil, fmt.Errorf("read cancel requests: %w", err)
	}
	slices.Sort(res.IDs)
	return res, nil
}
