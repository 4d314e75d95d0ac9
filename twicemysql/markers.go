package twicemysql

import (
	"context"

	"github.com/twicejobs/twice/twicestore"
)

// Not written yet: to be replaced by the port of twicesqlite/markers.go.

func (e *executor) MarkerClaim(_ context.Context, _ *twicestore.MarkerParams) (*twicestore.MarkerClaimResult, error) {
	return nil, errNotImplemented
}
func (e *executor) MarkerPeek(_ context.Context, _ *twicestore.MarkerParams) (*twicestore.MarkerPeekResult, error) {
	return nil, errNotImplemented
}
func (e *executor) MarkerPrune(_ context.Context, _ *twicestore.MarkerPruneParams) (*twicestore.MarkerPruneResult, error) {
	return nil, errNotImplemented
}
func (e *executor) MarkerRelease(_ context.Context, _ *twicestore.MarkerParams) error {
	return errNotImplemented
}

// claimMarker records, in q's transaction, that p.Handler processed
// p.Key, or reports AlreadyProcessed: JobFinish claims an outcome's
// markers with it. Not written yet.
func claimMarker(context.Context, dbtx, *twicestore.MarkerParams) (*twicestore.MarkerClaimResult, error) {
	return nil, errNotImplemented
}
