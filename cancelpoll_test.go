package twice_test

import (
	"slices"
	"testing"
	"time"

	"github.com/twicejobs/twice"
)

// TestCancelRunningJobByPoll: on SQLite, which cannot notify, a cancel
// reaches a running handler through the worker's cancel poll, long before
// the lease heartbeat could bring it: the lease is the default five
// minutes, so the first heartbeat comes 100 s after the start, well past
// the test's wait (waitfor.Timeout). It logs the latency of ten cancels.
func TestCancelRunningJobByPoll(t *testing.T) {
	t.Parallel()
	const runs = 10
	took := make([]time.Duration, 0, runs)
	for range runs {
		took = append(took, runCancelled(t, newStore(t), func(c *twice.Config) {
			c.LeaseDuration = twice.LeaseDurationDefault
		}, nil))
	}
	slices.Sort(took)
	t.Logf("SQLite cancel to handler, %d runs: p50 %s, max %s (heartbeat every %s)",
		runs, took[runs/2], took[runs-1], twice.LeaseDurationDefault/3)
}
