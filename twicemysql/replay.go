package twicemysql

import (
	"context"

	"github.com/twicejobs/twice/twicestore"
)

// Not written yet: to be replaced by the port of twicesqlite/replay.go.

func (e *executor) JobHistoryAppend(_ context.Context, _ *twicestore.JobHistoryAppendParams) error {
	return errNotImplemented
}
func (e *executor) JobRetryPreview(_ context.Context, _ *twicestore.JobRetryPreviewParams) (*twicestore.JobRetryPreviewResult, error) {
	return nil, errNotImplemented
}
