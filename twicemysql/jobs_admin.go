package twicemysql

import (
	"context"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// Not written yet: to be replaced by the port of twicesqlite/jobs_admin.go.

func (e *executor) JobCount(_ context.Context, _ *twicestore.JobCountParams) (*twicestore.JobCountResult, error) {
	return nil, errNotImplemented
}
func (e *executor) JobDeleteFinished(_ context.Context, _ *twicestore.JobDeleteFinishedParams) (*twicestore.JobDeleteFinishedResult, error) {
	return nil, errNotImplemented
}
func (e *executor) JobGet(_ context.Context, _ *twicestore.JobGetParams) (*twicetype.JobRow, error) {
	return nil, errNotImplemented
}
func (e *executor) JobList(_ context.Context, _ *twicestore.JobListParams) (*twicestore.JobListResult, error) {
	return nil, errNotImplemented
}
func (e *executor) JobOrphans(_ context.Context, _ *twicestore.JobOrphansParams) (*twicestore.JobOrphansResult, error) {
	return nil, errNotImplemented
}
