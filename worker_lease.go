package twice

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/twicejobs/twice/internal/logattr"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// runningJobs holds the leases of the jobs being worked, for the heartbeat
// that extends them and for cancelling their handlers. It is keyed by
// lease, not job id: after a lost lease the same job can be running here
// twice, under two epochs.
type runningJobs struct {
	mu   sync.Mutex
	jobs map[twicestore.JobLease]*runningJob
}

type runningJob struct {
	row    *twicetype.JobRow
	cancel context.CancelCauseFunc
	// lost is set when the lease was lost and the handler cancelled; a
	// handler still running a heartbeat later ignores its context.
	lost, stuckLogged bool
	// cancelled is set when an operator's cancel reached the handler.
	cancelled bool
	// returned is set once the handler returned and its outcome went to
	// the completer (see runningJobs.returned).
	returned bool
	// leaseUntil is when the lease the store last granted ends: the fetch's,
	// then each extension's. Past it the job is the rescuer's.
	leaseUntil time.Time
}

func newRunningJobs() *runningJobs {
	return &runningJobs{jobs: make(map[twicestore.JobLease]*runningJob)}
}

func leaseOf(row *twicetype.JobRow) twicestore.JobLease {
	return twicestore.JobLease{ID: row.ID, Epoch: row.Epoch}
}

func (r *runningJobs) add(row *twicetype.JobRow, cancel context.CancelCauseFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.jobs[leaseOf(row)] = &runningJob{row: row, cancel: cancel, leaseUntil: row.LeaseUntil}
}

// leaseUntil is when the lease of row's attempt ends, as far as this node
// knows: the completer retries an outcome until then.
func (r *runningJobs) leaseUntil(row *twicetype.JobRow) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if j, ok := r.jobs[leaseOf(row)]; ok {
		return j.leaseUntil
	}
	return row.LeaseUntil
}

// remove forgets a job once its outcome is settled; a job put back before
// it started was never added, which is fine.
func (r *runningJobs) remove(row *twicetype.JobRow) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.jobs, leaseOf(row))
}

func (r *runningJobs) leases() []twicestore.JobLease {
	r.mu.Lock()
	defer r.mu.Unlock()
	leases := make([]twicestore.JobLease, 0, len(r.jobs))
	for l := range r.jobs {
		leases = append(leases, l)
	}
	return leases
}

func (r *runningJobs) rows() []*twicetype.JobRow {
	r.mu.Lock()
	defer r.mu.Unlock()
	rows := make([]*twicetype.JobRow, 0, len(r.jobs))
	for _, j := range r.jobs {
		rows = append(rows, j.row)
	}
	return rows
}

// cancel cancels the handlers of job id running here with
// ErrJobCancelled, and reports whether one was. A job running under two
// epochs (refetched after a lost lease) is cancelled under both: the older
// is stale anyway.
func (r *runningJobs) cancel(id int64, logger *slog.Logger) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	found := false
	for l, j := range r.jobs {
		if l.ID != id || j.cancelled || j.returned { // a returned handler has nothing to cancel
			continue
		}
		found, j.cancelled = true, true
		jobLogger(logger, j.row).Info("job cancel requested; cancelling its handler", logattr.Component, "executor")
		j.cancel(ErrJobCancelled)
	}
	return found
}

// leaseKeeper is the lease heartbeat: it extends the leases of running
// jobs in one call every third of the lease, and cancels the handlers
// whose lease was lost or whose job an operator cancelled. It runs until
// Stop has drained the running jobs, not just until fetching stops.
type leaseKeeper struct {
	store   twicestore.Executor
	running *runningJobs
	lease   time.Duration
	logger  *slog.Logger
	now     func() time.Time
}

func newLeaseKeeper(c *Client, running *runningJobs) *leaseKeeper {
	return &leaseKeeper{store: c.store, running: running, lease: c.cfg.LeaseDuration, logger: c.logger, now: c.now}
}

func (k *leaseKeeper) run(ctx context.Context) {
	t := time.NewTicker(k.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		k.extend()
	}
}

// extend extends the leases of the running jobs once.
func (k *leaseKeeper) extend() {
	leases := k.running.leases()
	if len(leases) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), k.lease/3)
	defer cancel()
	until := k.now().Add(k.lease)
	res, err := k.store.JobExtendLease(ctx, &twicestore.JobExtendLeaseParams{Leases: leases, LeaseUntil: until})
	if err != nil {
		k.logger.Warn("extending leases failed", logattr.Component, "heartbeat", logattr.Err, err)
		return
	}
	extended := make(map[int64]bool, len(res.Extended))
	for _, id := range res.Extended {
		extended[id] = true
	}
	// A job refetched here after its lease was lost runs under two epochs;
	// only the newest can be the one the store extended.
	newest := make(map[int64]int64, len(leases))
	for _, l := range leases {
		newest[l.ID] = max(newest[l.ID], l.Epoch)
	}
	for _, id := range res.CancelRequested {
		k.running.cancel(id, k.logger)
	}
	rows := k.readBackLost(leases, func(l twicestore.JobLease) bool { return extended[l.ID] && l.Epoch == newest[l.ID] })
	r := k.running
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range leases {
		j, ok := r.jobs[l]
		switch {
		case !ok:
		case extended[l.ID] && l.Epoch == newest[l.ID]:
			j.leaseUntil = until
		case j.returned:
			// Its outcome is on its way and may have ended the lease
			// itself; the completer says what became of it.
		case rows[l] != nil && completedUnder(rows[l], l.Epoch) && !j.lost:
			// This attempt's own transaction completed it a moment ago
			// (a rescue never completes a job): nothing was lost.
		case !j.lost:
			j.lost = true
			logger := jobLogger(k.logger, j.row).With(logattr.Component, "heartbeat")
			if row := rows[l]; row != nil {
				logger.Warn("job lease lost; cancelling its handler", "state_now", row.State, "epoch_now", row.Epoch,
					"node_now", row.AttemptedBy)
			} else {
				logger.Warn("job lease not extended, and the job could not be read back; cancelling its handler, " +
					"as another worker may hold it")
			}
			j.cancel(ErrLeaseLost)
		case !j.stuckLogged:
			j.stuckLogged = true
			jobLogger(k.logger, j.row).Error("job handler is stuck: it ignores its cancelled context after losing its lease, "+
				"and another worker may be running the job", logattr.Component, "heartbeat")
		}
	}
}

// readBackLost reads back the jobs of leases the store did not extend and
// whose handler still runs, so the warning about each says what its row
// says: the job may have been finished by this attempt's own transaction
// a moment ago. A job that cannot be read has no entry.
func (k *leaseKeeper) readBackLost(leases []twicestore.JobLease, extended func(twicestore.JobLease) bool) map[twicestore.JobLease]*twicetype.JobRow {
	var lost []twicestore.JobLease
	k.running.mu.Lock()
	for _, l := range leases {
		if j, ok := k.running.jobs[l]; ok && !extended(l) && !j.returned && !j.lost {
			lost = append(lost, l)
		}
	}
	k.running.mu.Unlock()
	rows := make(map[twicestore.JobLease]*twicetype.JobRow, len(lost))
	for _, l := range lost {
		if row, err := readBack(k.store, l.ID); err == nil {
			rows[l] = row
		}
	}
	return rows
}
