package twicemysql

import (
	"context"

	"github.com/twicejobs/twice/twicestore"
)

// Not written yet: to be replaced by the port of twicesqlite/catalog.go.

func (e *executor) CatalogList(_ context.Context, _ *twicestore.CatalogListParams) (*twicestore.CatalogListResult, error) {
	return nil, errNotImplemented
}
func (e *executor) CatalogPublish(_ context.Context, _ *twicestore.CatalogPublishParams) error {
	return errNotImplemented
}
