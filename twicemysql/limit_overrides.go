package twicemysql

import (
	"context"

	"github.com/twicejobs/twice/twicestore"
)

// Not written yet: to be replaced by the port of twicesqlite/limit_overrides.go.

func (e *executor) LimitHistory(_ context.Context, _ *twicestore.LimitHistoryParams) (*twicestore.LimitHistoryResult, error) {
	return nil, errNotImplemented
}
func (e *executor) LimitHistoryPrune(_ context.Context, _ *twicestore.LimitHistoryPruneParams) (*twicestore.PruneResult, error) {
	return nil, errNotImplemented
}
func (e *executor) LimitOverrideClear(_ context.Context, _ *twicestore.LimitOverrideClearParams) (*twicestore.LimitOverrideClearResult, error) {
	return nil, errNotImplemented
}
func (e *executor) LimitOverrideList(_ context.Context, _ *twicestore.LimitOverrideListParams) (*twicestore.LimitOverrideListResult, error) {
	return nil, errNotImplemented
}
func (e *executor) LimitOverrideSet(_ context.Context, _ *twicestore.LimitOverrideSetParams) (*twicestore.LimitOverrideSetResult, error) {
	return nil, errNotImplemented
}
