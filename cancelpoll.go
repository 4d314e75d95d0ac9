package twice

import (
	"context"
	"time"

	"github.com/twicejobs/twice/internal/logattr"
	"github.com/twicejobs/twice/internal/periodic"
	"github.com/twicejobs/twice/twicestore"
)

// cancelPollInterval is how often a worker on a store with no
// CancelListener (SQLite) asks which of its running jobs an operator
// cancelled: a cancel reaches the handler within about this, not at the
// next lease heartbeat (a third of LeaseDuration).
const cancelPollInterval = 500 * time.Millisecond

// pollCancels cancels the handlers of running jobs an operator cancelled,
// on a store that cannot notify cancels. While this node runs no job it
// asks nothing; while it does, one read of primary-key lookups every
// cancelPollInterval. It runs until Stop has drained the running jobs.
func (c *Client) pollCancels(ctx context.Context) {
	for {
		t := time.NewTimer(periodic.Jitter(cancelPollInterval))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		leases := c.running.uncancelled()
		if len(leases) == 0 {
			continue
		}
		res, err := c.store.JobCancelRequested(ctx, &twicestore.JobCancelRequestedParams{Leases: leases})
		if err != nil {
			// The heartbeat reports a store it cannot reach, and it still
			// brings the cancel: no need to say it twice a second.
			c.logger.DebugContext(ctx, "reading cancel requests failed", logattr.Component, "heartbeat", logattr.Err, err)
			continue
		}
		for _, id := range res.IDs {
			c.running.cancel(id, c.jobLogger)
		}
	}
}

// uncancelled lists the leases of the running jobs whose handler still
// runs and was not cancelled yet: those a cancel request could still
// reach.
func (r *runningJobs) uncancelled() []twicestore.JobLease {
	r.mu.Lock()
	defer r.mu.Unlock()
	leases := make([]twicestore.JobLease, 0, len(r.jobs))
	for l, j := range r.jobs {
		if !j.cancelled && !j.lost && !j.returned {
			leases = append(leases, l)
		}
	}
	return leases
}
