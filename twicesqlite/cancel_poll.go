package twicesqlite

import (
	"context"
	"fmt"
	"slices"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/twicestore"
)

// JobCancelRequested reads, without writing, which of the leases still
// running under their epoch carry a cancel request: the worker's cancel
// poll, which stands in for PostgreSQL's notification.
func (e *executor) JobCancelRequested(ctx context.Context, p *twicestore.JobCancelRequestedParams) (*twicestore.JobCancelRequestedResult, error) {
	res := &twicestore.JobCancelRequestedResult{}
	if len(p.Leases) == 0 {
		return res, nil
	}
	leases := make([][2]int64, len(p.Leases))
	for i, l := range p.Leases {
		leases[i] = [2]int64{l.ID, l.Epoch}
	}
	// As in JobExtendLease, the unary + keeps each lease a primary-key
	// lookup rather than a scan of the running jobs.
	rows, err := e.db.QueryContext(ctx, `SELECT twice_jobs.id FROM twice_jobs
		JOIN (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS epoch FROM json_each(?)) AS l
		ON twice_jobs.id = l.id
		WHERE twice_jobs.epoch = l.epoch AND +twice_jobs.state = 'running' AND twice_jobs.cancel_requested_at IS NOT NULL`,
		jsonArg(leases))
	if err != nil {
		return nil, fmt.Errorf("read cancel requests: %w", err)
	}
	defer func() { _ = rows.Close() }() // rows.Err reports what matters
	for row, err := range dbrows.Iter(rows) {
		if err != nil {
			return nil, fmt.Errorf("read cancel requests: %w", err)
		}
		var id int64
		if err := row.Scan(&id); err != nil {
			return nil, fmt.Errorf("read cancel requests: %w", err)
		}
		res.IDs = append(res.IDs, id)
	}
	slices.Sort(res.IDs)
	return res, nil
}
