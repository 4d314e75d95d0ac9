package twicemysql

import (
	"context"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// Not written yet: to be replaced by the port of twicesqlite/waits.go.

func (e *executor) JobSignal(_ context.Context, _ *twicestore.JobSignalParams) (*twicestore.JobSignalResult, error) {
	return nil, errNotImplemented
}
func (e *executor) JobSignalGet(_ context.Context, _ *twicestore.JobSignalGetParams) (*twicetype.Signal, error) {
	return nil, errNotImplemented
}
func (e *executor) JobWakeDue(_ context.Context, _ *twicestore.JobWakeDueParams) (*twicestore.JobWakeDueResult, error) {
	return nil, errNotImplemented
}
