package twicemysql

import (
	"context"

	"github.com/twicejobs/twice/twicestore"
)

// Not written yet: to be replaced by the port of twicesqlite/toggles.go.

func (e *executor) ToggleDelete(_ context.Context, _ *twicestore.ToggleDeleteParams) error {
	return errNotImplemented
}
func (e *executor) ToggleHistory(_ context.Context, _ *twicestore.ToggleHistoryParams) (*twicestore.ToggleHistoryResult, error) {
	return nil, errNotImplemented
}
func (e *executor) ToggleList(_ context.Context, _ *twicestore.ToggleListParams) (*twicestore.ToggleListResult, error) {
	return nil, errNotImplemented
}
func (e *executor) ToggleSet(_ context.Context, _ *twicestore.ToggleSetParams) error {
	return errNotImplemented
}
