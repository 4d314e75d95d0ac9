package twicemysql

import (
	"context"

	"github.com/twicejobs/twice/twicestore"
)

// Not written yet: to be replaced by the port of twicesqlite/limits.go.

func (e *executor) LimitList(_ context.Context, _ *twicestore.LimitListParams) (*twicestore.LimitListResult, error) {
	return nil, errNotImplemented
}
