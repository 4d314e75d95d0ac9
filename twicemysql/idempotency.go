package twicemysql

import (
	"context"

	"github.com/twicejobs/twice/twicestore"
)

// Not written yet: to be replaced by the port of twicesqlite/idempotency.go.

func (e *executor) IdempotencyBegin(_ context.Context, _ *twicestore.IdempotencyBeginParams) (*twicestore.IdempotencyBeginResult, error) {
	return nil, errNotImplemented
}
func (e *executor) IdempotencyComplete(_ context.Context, _ *twicestore.IdempotencyCompleteParams) error {
	return errNotImplemented
}
func (e *executor) IdempotencyExtend(_ context.Context, _ *twicestore.IdempotencyExtendParams) (*twicestore.IdempotencyExtendResult, error) {
	return nil, errNotImplemented
}
func (e *executor) IdempotencyPrune(_ context.Context, _ *twicestore.IdempotencyPruneParams) (*twicestore.IdempotencyPruneResult, error) {
	return nil, errNotImplemented
}
func (e *executor) IdempotencyRelease(_ context.Context, _ *twicestore.IdempotencyKeyParams) error {
	return errNotImplemented
}
