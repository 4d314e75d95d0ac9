package twicemysql

import (
	"context"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// Not written yet: to be replaced by the port of twicesqlite/steps.go.

func (e *executor) JobOutput(_ context.Context, _ *twicestore.JobGetParams) (*twicestore.JobOutputResult, error) {
	return nil, errNotImplemented
}
func (e *executor) StepClaim(_ context.Context, _ *twicestore.StepParams) (*twicestore.StepClaimResult, error) {
	return nil, errNotImplemented
}
func (e *executor) StepComplete(_ context.Context, _ *twicestore.StepParams) error {
	return errNotImplemented
}
func (e *executor) StepGet(_ context.Context, _ *twicestore.StepParams) (*twicetype.Step, error) {
	return nil, errNotImplemented
}
func (e *executor) StepPrune(_ context.Context, _ *twicestore.MarkerPruneParams) (*twicestore.MarkerPruneResult, error) {
	return nil, errNotImplemented
}
func (e *executor) StepRelease(_ context.Context, _ *twicestore.StepParams) error {
	return errNotImplemented
}
func (e *executor) StepSettle(_ context.Context, _ *twicestore.StepParams) error {
	return errNotImplemented
}
