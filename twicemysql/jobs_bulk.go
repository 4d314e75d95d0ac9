package twicemysql

import (
	"context"

	"github.com/twicejobs/twice/twicestore"
)

// Not written yet: to be replaced by the port of twicesqlite/jobs_bulk.go.

func (e *executor) JobCancel(_ context.Context, _ *twicestore.JobCancelParams) (*twicestore.JobBulkResult, error) {
	return nil, errNotImplemented
}
func (e *executor) JobDelete(_ context.Context, _ *twicestore.JobBulkParams) (*twicestore.JobBulkResult, error) {
	return nil, errNotImplemented
}
func (e *executor) JobDiscard(_ context.Context, _ *twicestore.JobBulkParams) (*twicestore.JobBulkResult, error) {
	return nil, errNotImplemented
}
func (e *executor) JobRetry(_ context.Context, _ *twicestore.JobBulkParams) (*twicestore.JobBulkResult, error) {
	return nil, errNotImplemented
}
func (e *executor) JobRunNow(_ context.Context, _ *twicestore.JobBulkParams) (*twicestore.JobBulkResult, error) {
	return nil, errNotImplemented
}
