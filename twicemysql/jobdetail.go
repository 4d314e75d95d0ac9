package twicemysql

import (
	"context"

	"github.com/twicejobs/twice/twicestore"
)

// Not written yet: to be replaced by the port of twicesqlite/jobdetail.go.

func (e *executor) JobLinks(_ context.Context, _ *twicestore.JobGetParams) (*twicestore.JobLinksResult, error) {
	return nil, errNotImplemented
}
