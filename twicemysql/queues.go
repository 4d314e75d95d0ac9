package twicemysql

import (
	"context"

	"github.com/twicejobs/twice/twicestore"
)

// Not written yet: to be replaced by the port of twicesqlite/queues.go.

func (e *executor) QueueList(_ context.Context, _ *twicestore.QueueListParams) (*twicestore.QueueListResult, error) {
	return nil, errNotImplemented
}
func (e *executor) QueuePause(_ context.Context, _ *twicestore.QueuePauseParams) error {
	return errNotImplemented
}
func (e *executor) QueueResume(_ context.Context, _ *twicestore.QueueResumeParams) (*twicestore.QueueResumeResult, error) {
	return nil, errNotImplemented
}
func (e *executor) QueueStranded(_ context.Context, _ *twicestore.QueueStrandedParams) (*twicestore.QueueStrandedResult, error) {
	return nil, errNotImplemented
}
