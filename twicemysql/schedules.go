package twicemysql

import (
	"context"

	"github.com/twicejobs/twice/twicestore"
)

// Not written yet: to be replaced by the port of twicesqlite/schedules.go.

func (e *executor) ScheduleList(_ context.Context, _ *twicestore.ScheduleListParams) (*twicestore.ScheduleListResult, error) {
	return nil, errNotImplemented
}
func (e *executor) ScheduleRemove(_ context.Context, _ *twicestore.ScheduleRemoveParams) error {
	return errNotImplemented
}
func (e *executor) ScheduleTick(_ context.Context, _ *twicestore.ScheduleTickParams) (*twicestore.ScheduleTickResult, error) {
	return nil, errNotImplemented
}
func (e *executor) ScheduleTicks(_ context.Context, _ *twicestore.ScheduleTicksParams) (*twicestore.ScheduleTicksResult, error) {
	return nil, errNotImplemented
}
