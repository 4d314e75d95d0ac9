package twicemysql

import (
	"context"

	"github.com/twicejobs/twice/twicestore"
)

// Not written yet: to be replaced by the port of twicesqlite/stats.go.

func (e *executor) JobQueueStats(_ context.Context, _ *twicestore.JobQueueStatsParams) (*twicestore.JobQueueStatsResult, error) {
	return nil, errNotImplemented
}
func (e *executor) JobThroughput(_ context.Context, _ *twicestore.JobThroughputParams) (*twicestore.JobThroughputResult, error) {
	return nil, errNotImplemented
}
