package twicemysql

// What a job's page shows beside the job: the steps of its message and
// what it belongs to.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/twicejobs/twice/twicestore"
)

// JobLinks reads a job's parent and batch.
func (e *executor) JobLinks(ctx context.Context, p *twicestore.JobGetParams) (*twicestore.JobLinksResult, error) {
	res := &twicestore.JobLinksResult{}
	err := e.db.QueryRowContext(ctx, `SELECT COALESCE(parent_id, 0), COALESCE(batch_id, 0) FROM twice_jobs WHERE id = ?`, p.ID).
		Scan(&res.ParentID, &res.BatchID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("links of job %d: %w", p.ID, twicestore.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("links of job %d: %w", p.ID, err)
	}
	return res, nil
}
