package twicemysql

import (
	"context"

	"github.com/twicejobs/twice/twicestore"
)

// Not written yet: to be replaced by the port of twicesqlite/cancel_poll.go.

func (e *executor) JobCancelRequested(_ context.Context, _ *twicestore.JobCancelRequestedParams) (*twicestore.JobCancelRequestedResult, error) {
	return nil, errNotImplemented
}
