package twicemysql

import (
	"context"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// Not written yet: to be replaced by the port of twicesqlite/compose.go.

func (e *executor) BatchAdd(_ context.Context, _ *twicestore.BatchAddParams) (*twicestore.BatchAddResult, error) {
	return nil, errNotImplemented
}
func (e *executor) BatchGet(_ context.Context, _ *twicestore.BatchGetParams) (*twicetype.Batch, error) {
	return nil, errNotImplemented
}
func (e *executor) BatchInsert(_ context.Context, _ *twicestore.BatchInsertParams) (*twicestore.BatchInsertResult, error) {
	return nil, errNotImplemented
}
func (e *executor) BatchList(_ context.Context, _ *twicestore.BatchListParams) (*twicestore.BatchListResult, error) {
	return nil, errNotImplemented
}
func (e *executor) BatchSeal(_ context.Context, _ *twicestore.BatchSealParams) (*twicetype.Batch, error) {
	return nil, errNotImplemented
}
func (e *executor) JobChildren(_ context.Context, _ *twicestore.JobChildrenParams) ([]*twicetype.JobRow, error) {
	return nil, errNotImplemented
}
func (e *executor) WorkflowCancel(_ context.Context, _ *twicestore.WorkflowCancelParams) (*twicestore.WorkflowCancelResult, error) {
	return nil, errNotImplemented
}
func (e *executor) WorkflowGet(_ context.Context, _ *twicestore.WorkflowGetParams) (*twicestore.WorkflowGetResult, error) {
	return nil, errNotImplemented
}
func (e *executor) WorkflowInsert(_ context.Context, _ *twicestore.WorkflowInsertParams) (*twicestore.WorkflowInsertResult, error) {
	return nil, errNotImplemented
}
func (e *executor) WorkflowList(_ context.Context, _ *twicestore.WorkflowListParams) (*twicestore.WorkflowListResult, error) {
	return nil, errNotImplemented
}
func (e *executor) WorkflowTaskOf(_ context.Context, _ *twicestore.WorkflowTaskOfParams) (*twicestore.WorkflowTaskOfResult, error) {
	return nil, errNotImplemented
}

// settleComposition inserts the jobs the statements of its transaction
// set off: a batch's callback (callback_state 1) and the workflow tasks
// whose dependencies have all completed. Not written yet.
func settleComposition(context.Context, dbtx) error { return nil }

// insertChildren inserts, in JobFinish's transaction, the continuation
// jobs of an outcome (Then) when driverkit.ChildrenEarned says so. Not
// written yet.
func insertChildren(context.Context, dbtx, *twicestore.JobOutcome, bool, bool) error {
	return errNotImplemented
}
