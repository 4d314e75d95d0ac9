package twicemysql

import (
	"context"

	"github.com/twicejobs/twice/twicestore"
)

// Not written yet: to be replaced by the port of twicesqlite/retention.go.

func (e *executor) BatchPrune(_ context.Context, _ *twicestore.BatchPruneParams) (*twicestore.PruneScanResult, error) {
	return nil, errNotImplemented
}
func (e *executor) NodePrune(_ context.Context, _ *twicestore.NodePruneParams) (*twicestore.PruneResult, error) {
	return nil, errNotImplemented
}
func (e *executor) ToggleHistoryPrune(_ context.Context, _ *twicestore.ToggleHistoryPruneParams) (*twicestore.PruneResult, error) {
	return nil, errNotImplemented
}
func (e *executor) WorkflowPrune(_ context.Context, _ *twicestore.WorkflowPruneParams) (*twicestore.PruneScanResult, error) {
	return nil, errNotImplemented
}
