package twicemysql

import (
	"context"

	"github.com/twicejobs/twice/twicestore"
)

// Not written yet: to be replaced by the port of twicesqlite/jobs_admin.go.

func (e *executor) JobDeleteFinished(_ context.Context, _ *twicestore.JobDeleteFinishedParams) (*twicestore.JobDeleteFinishedResult, error) {
	return nil, errNotImplemented
}
func (e *executor) JobOrphans(_ context.Context, _ *twicestore.JobOrphansParams) (*twicestore.JobOrphansResult, error) {
	return nil, errNotImplemented
}
