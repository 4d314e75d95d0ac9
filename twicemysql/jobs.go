package twicemysql

import (
	"context"

	"github.com/twicejobs/twice/twicestore"
)

// Not written yet: to be replaced by the port of twicesqlite/jobs.go.

func (e *executor) JobExtendLease(_ context.Context, _ *twicestore.JobExtendLeaseParams) (*twicestore.JobExtendLeaseResult, error) {
	return nil, errNotImplemented
}
func (e *executor) JobFetch(_ context.Context, _ *twicestore.JobFetchParams) (*twicestore.JobFetchResult, error) {
	return nil, errNotImplemented
}
func (e *executor) JobFinish(_ context.Context, _ *twicestore.JobFinishParams) (*twicestore.JobFinishResult, error) {
	return nil, errNotImplemented
}
func (e *executor) JobInsertMany(_ context.Context, _ *twicestore.JobInsertManyParams) (*twicestore.JobInsertManyResult, error) {
	return nil, errNotImplemented
}
func (e *executor) JobRescue(_ context.Context, _ *twicestore.JobRescueParams) (*twicestore.JobRescueResult, error) {
	return nil, errNotImplemented
}
