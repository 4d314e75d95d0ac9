package twice

import (
	"context"
	"log/slog"
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

// cancelWatcher cancels the handler of a running job as soon as it
// learns an operator cancelled the job: from the store's notifications
// where it sends them (PostgreSQL), else by polling (SQLite). The lease
// heartbeat brings a cancel too, a third of a lease later; this watcher
// is what makes it prompt. It runs until Stop has drained the running
// jobs.
type cancelWatcher struct {
	store   twicestore.Store
	running *runningJobs
	logger  *slog.Logger
}

func newCancelWatcher(c *Client, running *runningJobs) *cancelWatcher {
	return &cancelWatcher{store: c.store, running: running, logger: c.logger}
}

func (w *cancelWatcher) run(ctx context.Context) {
	if l, ok := twicestore.As[twicestore.CancelListener](w.store); ok {
		w.listen(ctx, l)
		return
	}
	w.poll(ctx)
}

// listen cancels on the store's notifications; the heartbeat catches a
// lost one.
func (w *cancelWatcher) listen(ctx context.Context, l twicestore.CancelListener) {
	err := l.ListenCancels(ctx, func(id int64) { w.running.cancel(id, w.logger) })
	if err != nil && ctx.Err() == nil {
		w.logger.Warn("listening for job cancels stopped; cancels arrive with the lease heartbeat only",
			logattr.Component, "listener", logattr.Err, err)
	}
}

// poll asks, on a store that cannot notify cancels, which running jobs
// were cancelled. While this node runs no job it asks nothing; while it
// does, one read of primary-key lookups every cancelPollInterval.
func (w *cancelWatcher) poll(ctx context.Context) {
	for {
		t := time.NewTimer(periodic.Jitter(cancelPollInterval))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		leases := w.running.uncancelled()
		if len(leases) == 0 {
			continue
		}
		res, err := w.store.JobCancelRequested(ctx, &twicestore.JobCancelRequestedParams{Leases: leases})
		if err != nil {
			// The heartbeat reports a store it cannot reach, and it still
			// brings the cancel: no need to say it twice a second.
			w.logger.DebugContext(ctx, "reading cancel requests failed", logattr.Component, "heartbeat", logattr.Err, err)
			continue
		}
		for _, id := range res.IDs {
			w.running.cancel(id, w.logger)
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
