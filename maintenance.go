package twice

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/twicejobs/twice/internal/logattr"
	"github.com/twicejobs/twice/internal/periodic"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// How often a node reports itself, and how stale a report may be before
// the node counts as gone (for orphan detection).
const (
	nodeHeartbeatInterval = 10 * time.Second
	nodeAliveWindow       = 3 * nodeHeartbeatInterval
	orphanReportInterval  = time.Minute
	pruneInterval         = 10 * time.Minute
	maintenanceBatch      = 1000
)

// rescueLoop makes jobs whose lease expired fetchable again. Any node may
// run it: the rescue is one guarded update, so two nodes rescuing at once
// do the work once.
func (c *Client) rescueLoop(ctx context.Context) {
	logger := c.logger.With(logattr.Component, "rescuer")
	periodic.Run(ctx, c.cfg.RescueInterval, func(ctx context.Context) {
		res, err := c.store.JobRescue(ctx, &twicestore.JobRescueParams{Now: time.Now(), Limit: maintenanceBatch})
		if err != nil {
			if ctx.Err() == nil {
				logger.WarnContext(ctx, "rescuing expired leases failed", logattr.Err, err)
			}
			return
		}
		for _, id := range res.Requeued {
			if row, err := c.store.JobGet(ctx, &twicestore.JobGetParams{ID: id}); err == nil {
				c.jobLogger(row).WarnContext(ctx, "job's lease expired: its worker died or stalled; it will run again",
					logattr.Component, "rescuer", logattr.Node, row.AttemptedBy)
			}
		}
		if len(res.Requeued) > 0 {
			c.producer.Notify()
		}
		for _, id := range res.Dead {
			row, err := c.store.JobGet(ctx, &twicestore.JobGetParams{ID: id})
			if err != nil {
				continue
			}
			c.jobLogger(row).ErrorContext(ctx, "job dead-lettered: its lease expired on the final attempt", logattr.Component, "rescuer")
			if c.cfg.OnDead != nil {
				c.cfg.OnDead(ctx, DeadJob{Job: row, Err: errLeaseExpired})
			}
		}
	})
}

var errLeaseExpired = errors.New("lease expired on the final attempt")

// pruneLoop deletes finished jobs and markers older than their retention,
// and expired Idempotency-Key records, in bounded batches, so no statement
// holds locks for long. Any node may run it; the batches of two nodes never
// delete a row twice.
func (c *Client) pruneLoop(ctx context.Context) {
	logger := c.logger.With(logattr.Component, "pruner")
	periodic.Run(ctx, pruneInterval, func(ctx context.Context) {
		now := time.Now()
		cutoff := func(d time.Duration) time.Time {
			if d == KeepForever {
				return time.Time{}
			}
			return now.Add(-d)
		}
		jobs := &twicestore.JobDeleteFinishedParams{
			CompletedBefore: cutoff(c.cfg.CompletedRetention),
			DeadBefore:      cutoff(c.cfg.DeadRetention),
			DiscardedBefore: cutoff(c.cfg.DiscardedRetention),
			CancelledBefore: cutoff(c.cfg.DiscardedRetention),
			Limit:           maintenanceBatch,
		}
		for ctx.Err() == nil {
			res, err := c.store.JobDeleteFinished(ctx, jobs)
			if err != nil {
				if ctx.Err() == nil {
					logger.WarnContext(ctx, "deleting finished jobs failed", logattr.Err, err)
				}
				break
			}
			if res.Deleted < maintenanceBatch {
				break
			}
		}
		for ctx.Err() == nil { // expired Idempotency-Key records (twicehttp)
			res, err := c.store.IdempotencyPrune(ctx, &twicestore.IdempotencyPruneParams{Before: now, Limit: maintenanceBatch})
			if err != nil {
				if ctx.Err() == nil {
					logger.WarnContext(ctx, "pruning expired idempotency keys failed", logattr.Err, err)
				}
				break
			}
			if res.Deleted < maintenanceBatch {
				break
			}
		}
		before := now.Add(-c.cfg.MarkerRetention)
		for ctx.Err() == nil { // named steps' markers (twice.Step) are kept as long as markers
			res, err := c.store.StepPrune(ctx, &twicestore.MarkerPruneParams{Before: before, Limit: maintenanceBatch})
			if err != nil {
				if ctx.Err() == nil {
					logger.WarnContext(ctx, "pruning step markers failed", logattr.Err, err)
				}
				break
			}
			if res.Deleted < maintenanceBatch {
				break
			}
		}
		for ctx.Err() == nil {
			res, err := c.store.MarkerPrune(ctx, &twicestore.MarkerPruneParams{Before: before, Limit: maintenanceBatch})
			if err != nil {
				if ctx.Err() == nil {
					logger.WarnContext(ctx, "pruning markers failed", logattr.Err, err)
				}
				return
			}
			if res.Deleted < maintenanceBatch {
				return
			}
		}
	})
}

// nodeLoop reports this node alive with the kinds it handles, publishes
// them to the kind catalog (so tools without this binary's registry know
// them), and reports kinds with waiting jobs that no live node handles and
// queues with waiting jobs that no live node serves.
func (c *Client) nodeLoop(ctx context.Context) {
	logger := c.logger.With(logattr.Component, "nodes")
	started := time.Now()
	node := &twicetype.Node{
		ID: c.cfg.NodeID, Host: hostname(), PID: os.Getpid(),
		Kinds: c.registry.Kinds(), Queues: c.queueNames(), StartedAt: started,
	}
	var lastOrphanReport time.Time
	periodic.Run(ctx, nodeHeartbeatInterval, func(ctx context.Context) {
		node.HeartbeatAt = time.Now()
		if err := c.store.NodeHeartbeat(ctx, &twicestore.NodeHeartbeatParams{Node: node}); err != nil {
			if ctx.Err() == nil {
				logger.WarnContext(ctx, "node heartbeat failed", logattr.Err, err)
			}
			return
		}
		if err := c.publishCatalog(ctx); err != nil && ctx.Err() == nil {
			logger.WarnContext(ctx, "publishing the kind catalog failed", logattr.Err, err)
		}
		if time.Since(lastOrphanReport) < orphanReportInterval {
			return
		}
		now := time.Now()
		nodes, err := c.store.NodeList(ctx, &twicestore.NodeListParams{AliveSince: now.Add(-nodeAliveWindow)})
		if err != nil {
			if ctx.Err() == nil {
				logger.WarnContext(ctx, "listing live nodes failed", logattr.Err, err)
			}
			return
		}
		if !fleetSettled(nodes, now) {
			return
		}
		lastOrphanReport = now
		orphans, err := c.Orphans(ctx)
		if err != nil {
			if ctx.Err() == nil {
				logger.WarnContext(ctx, "looking for orphaned jobs failed", logattr.Err, err)
			}
			return
		}
		for _, o := range orphans {
			logger.WarnContext(ctx, "jobs are waiting for a kind no live worker handles; they are kept, not failed — deploy a worker that registers it",
				logattr.Kind, o.Kind, logattr.Queue, o.Queue, "count", o.Count, "oldest", o.Oldest)
		}
		stranded, err := c.StrandedQueues(ctx)
		if err != nil {
			if ctx.Err() == nil {
				logger.WarnContext(ctx, "looking for stranded queues failed", logattr.Err, err)
			}
			return
		}
		for _, q := range stranded {
			logger.WarnContext(ctx, "jobs are waiting in a queue no live worker serves; they are kept, not failed — add the queue to a worker's Config.Queues",
				logattr.Queue, q.Queue, "count", q.Count, "oldest", q.Oldest)
		}
	})
}

// fleetSettled reports whether the fleet's view of who handles what is
// settled at now, so kinds and queues no live node serves can be reported:
// a node alive in the store started nodeAliveWindow ago or earlier, and
// the nodes started with it (a deploy) have heartbeated since. It is the
// fleet's uptime that counts, not this node's: a worker restarted faster
// than the window (a crash loop) still reports, as the rows of its
// earlier runs, alive for a window after their last heartbeat, show the
// fleet has been up; a fleet started all at once waits the window.
func fleetSettled(nodes []*twicetype.Node, now time.Time) bool {
	for _, n := range nodes {
		if !n.StartedAt.After(now.Add(-nodeAliveWindow)) {
			return true
		}
	}
	return false
}

// Orphans lists kinds with waiting jobs that no live worker handles. Such
// jobs are never failed or dropped; they wait for a worker that knows them.
func (c *Client) Orphans(ctx context.Context) ([]twicetype.OrphanKind, error) {
	res, err := c.store.JobOrphans(ctx, &twicestore.JobOrphansParams{AliveSince: time.Now().Add(-nodeAliveWindow)})
	if err != nil {
		return nil, err
	}
	return res.Kinds, nil
}

// StrandedQueues lists queues with waiting jobs that no live worker
// serves: a worker may know their kinds, but none fetches from the queue.
// Such jobs are never failed or dropped; they wait for a worker that lists
// the queue in its Config.Queues.
func (c *Client) StrandedQueues(ctx context.Context) ([]twicetype.StrandedQueue, error) {
	res, err := c.store.QueueStranded(ctx, &twicestore.QueueStrandedParams{AliveSince: time.Now().Add(-nodeAliveWindow)})
	if err != nil {
		return nil, err
	}
	return res.Queues, nil
}

func (c *Client) queueNames() []string {
	names := make([]string, len(c.cfg.Queues))
	for i, q := range c.cfg.Queues {
		names[i] = q.Name
	}
	return names
}
