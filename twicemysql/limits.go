package twicemysql

import (
	"context"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

func (e *executor) LimitList(_ context.Context, _ *twicestore.LimitListParams) (*twicestore.LimitListResult, error) {
	return nil, errNotImplemented
}

func (e *executor) fetchLimited(context.Context, *twicestore.JobFetchParams, []string) ([]*twicetype.JobRow, bool, time.Time, error) {
	return nil, false, time.Time{}, errNotImplemented
}
