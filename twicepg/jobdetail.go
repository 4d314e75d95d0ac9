package twicepg

// What a job's page shows beside the job: the steps of its message and
// what it belongs to.

import (
	"context"
	"fmt"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
)

// StepList lists the steps of one handler and key, read by the primary
// key's (handler, key) prefix in step order.
func (e *executor) StepList(ctx context.Context, p *twicestore.StepListParams) (*twicestore.StepListResult, error) {
	rs, err := e.q.query(ctx, `SELECT `+driverkit.StepColumns+` FROM twice_steps
		WHERE handler = $1 AND key = $2 ORDER BY step LIMIT $3`, p.Handler, p.Key, limitArg(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list steps of %q/%q: %w", p.Handler, p.Key, err)
	}
	steps, err := dbrows.Collect(rs, driverkit.StepRow(driverkit.NativeTimes, p.Handler, p.Key))
	if err != nil {
		return nil, fmt.Errorf("list steps of %q/%q: %w", p.Handler, p.Key, err)
	}
	return &twicestore.StepListResult{Steps: steps}, nil
}

// JobLinks reads a job's parent and batch.
func (e *executor) JobLinks(ctx context.Context, p *twicestore.JobGetParams) (*twicestore.JobLinksResult, error) {
	res := &twicestore.JobLinksResult{}
	err := e.q.queryRow(ctx, `SELECT coalesce(parent_id, 0), coalesce(batch_id, 0) FROM twice_jobs WHERE id = $1`, p.ID).
		Scan(&res.ParentID, &res.BatchID)
	if isNoRows(err) {
		return nil, fmt.Errorf("links of job %d: %w", p.ID, twicestore.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("links of job %d: %w", p.ID, err)
	}
	return res, nil
}
