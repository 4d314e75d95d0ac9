package twice

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/twicejobs/twice/internal/logattr"
	"github.com/twicejobs/twice/internal/ops"
	"github.com/twicejobs/twice/internal/periodic"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// How often a node reports itself, and how stale a report may be before
// the node counts as gone (for orphan detection): the one window the CLI,
// the dashboard and the metrics read too (internal/ops).
const (
	nodeHeartbeatInterval = 10 * time.Second
	nodeAliveWindow       = ops.NodeAliveWindow
	orphanReportInterval  = time.Minute
	pruneInterval         = 10 * time.Minute
	maintenanceBatch      = 1000
)

// rescuer makes jobs whose lease expired fetchable again. Any node may
// run it: the rescue is one guarded update, so two nodes rescuing at once
// do the work once.
type rescuer struct {
	store    twicestore.Executor
	interval time.Duration
	logger   *slog.Logger
	onDead   func(context.Context, DeadJob)
	// wake wakes the fetch loop: requeued jobs are due now.
	wake func()
	now  func() time.Time
}

func newRescuer(c *Client, wake func()) *rescuer {
	return &rescuer{store: c.store, interval: c.cfg.RescueInterval, logger: c.logger, onDead: c.cfg.OnDead, wake: wake, now: c.now}
}

func (r *rescuer) run(ctx context.Context) {
	periodic.Run(ctx, r.interval, r.rescue)
}

// rescue releases one batch of expired leases and says, per job, what
// became of it.
func (r *rescuer) rescue(ctx context.Context) {
	res, err := r.store.JobRescue(ctx, &twicestore.JobRescueParams{Now: r.now(), Limit: maintenanceBatch})
	if err != nil {
		if ctx.Err() == nil {
			r.logger.WarnContext(ctx, "rescuing expired leases failed", logattr.Component, "rescuer", logattr.Err, err)
		}
		return
	}
	requeued := false
	for _, row := range res.Jobs {
		logger := jobLogger(r.logger, row)
		switch row.State {
		case twicetype.JobStateAvailable:
			requeued = true
			logger.WarnContext(ctx, "job's lease expired: its worker died or stalled; it will run again",
				logattr.Component, "rescuer", logattr.Node, row.AttemptedBy)
		case twicetype.JobStateDead:
			logger.ErrorContext(ctx, "job dead-lettered: its lease expired on the final attempt", logattr.Component, "rescuer")
			if r.onDead != nil {
				r.onDead(ctx, DeadJob{Job: row, Err: errLeaseExpired})
			}
		}
	}
	if requeued {
		r.wake()
	}
}

var errLeaseExpired = errors.New("lease expired on the final attempt")

// waitTimerInterval is how often a worker fires the timers of waiting
// jobs (a Sleep's end, an AwaitSignal's timeout): a timer fires at most
// this late, and a pass with no timer due is one indexed read.
const waitTimerInterval = time.Second

// waitTimers makes waiting jobs whose timer passed available, their
// waits resolved as timed out. Any node may run it: a job's timer fires
// once, whichever node gets there first, and never after its signal.
type waitTimers struct {
	store  twicestore.Executor
	logger *slog.Logger
	wake   func()
	now    func() time.Time
}

func (t *waitTimers) run(ctx context.Context) {
	periodic.Run(ctx, waitTimerInterval, t.fire)
}

func (t *waitTimers) fire(ctx context.Context) {
	res, err := t.store.JobWakeDue(ctx, &twicestore.JobWakeDueParams{Now: t.now(), Limit: maintenanceBatch})
	if err != nil {
		if ctx.Err() == nil {
			t.logger.WarnContext(ctx, "firing the timers of waiting jobs failed", logattr.Err, err)
		}
		return
	}
	if len(res.Woken) > 0 {
		t.logger.DebugContext(ctx, "waiting jobs' timers fired", "jobs", len(res.Woken))
		t.wake()
	}
}

// deadNodeRetention is how long a node's row outlives its last
// heartbeat: far beyond nodeAliveWindow, so a node that died over a
// weekend is still on record, yet bounded, so a fleet whose node ids
// change at every restart does not grow the table for ever.
const deadNodeRetention = 7 * 24 * time.Hour

// rotateInterval is how often a worker asks a store that keeps its live
// jobs in generations (twicestore.Rotator) to empty the one new jobs are
// not entering. PostgreSQL's generations take turns every 30 s.
const rotateInterval = 5 * time.Second

// rotator empties the store's idle generation of live jobs when its dead
// row versions are worth it (twicestore.Rotator), which keeps them bounded
// beside a snapshot held for long. Any node may run it.
type rotator struct {
	store  twicestore.Rotator
	logger *slog.Logger
}

// newRotator returns the rotator of c's store, or nil when the store has
// no generations (SQLite).
func newRotator(c *Client) *rotator {
	r, ok := c.store.(twicestore.Rotator)
	if !ok {
		return nil
	}
	return &rotator{store: r, logger: c.logger.With(logattr.Component, "rotator")}
}

func (r *rotator) run(ctx context.Context) {
	periodic.Run(ctx, rotateInterval, r.rotate)
}

func (r *rotator) rotate(ctx context.Context) {
	res, err := r.store.JobRotate(ctx, &twicestore.JobRotateParams{})
	if err != nil {
		if ctx.Err() == nil {
			r.logger.WarnContext(ctx, "emptying a generation of live jobs failed", logattr.Err, err)
		}
		return
	}
	if res.Emptied {
		r.logger.DebugContext(ctx, "emptied a generation of live jobs", "generation", res.Generation,
			"dead", res.Dead, "moved", res.Moved)
	}
	if res.Analyzed {
		r.logger.DebugContext(ctx, "refreshed the statistics of the generation new jobs enter", "generation", 1-res.Generation)
	}
}

// pruner deletes, in bounded batches so no statement holds locks for
// long: finished jobs older than their retention; then the workflows and
// batches none of whose jobs is left (they leave with their last job);
// switch and limit history older than its retention (but each switch's
// and override's newest change); nodes dead for deadNodeRetention; expired Idempotency-Key
// records; and markers and steps older than MarkerRetention. Any node may
// run it; the batches of two nodes never delete a row twice.
type pruner struct {
	store  twicestore.Executor
	cfg    *Config
	logger *slog.Logger
	now    func() time.Time
}

func newPruner(c *Client) *pruner {
	return &pruner{store: c.store, cfg: &c.cfg, logger: c.logger.With(logattr.Component, "pruner"), now: c.now}
}

func (p *pruner) run(ctx context.Context) {
	periodic.Run(ctx, pruneInterval, func(ctx context.Context) { p.pruneAll(ctx, p.now()) })
}

// pruneAll runs one pass: every kind of record, each in batches until a
// batch comes back short.
func (p *pruner) pruneAll(ctx context.Context, now time.Time) {
	logger := p.logger
	cutoff := func(d time.Duration) time.Time {
		if d == KeepForever {
			return time.Time{}
		}
		return now.Add(-d)
	}
	full := func(deleted int) bool { return deleted >= maintenanceBatch }
	jobs := &twicestore.JobDeleteFinishedParams{
		CompletedBefore: cutoff(p.cfg.CompletedRetention),
		DeadBefore:      cutoff(p.cfg.DeadRetention),
		DiscardedBefore: cutoff(p.cfg.DiscardedRetention),
		CancelledBefore: cutoff(p.cfg.DiscardedRetention),
		Limit:           maintenanceBatch,
	}
	workflows := &twicestore.WorkflowPruneParams{Limit: maintenanceBatch}
	batches := &twicestore.BatchPruneParams{Limit: maintenanceBatch}
	// Steps are kept as long as markers; each carries its own cursor.
	markers := &twicestore.MarkerPruneParams{Before: now.Add(-p.cfg.MarkerRetention), Limit: maintenanceBatch}
	stepMarkers := &twicestore.MarkerPruneParams{Before: markers.Before, Limit: maintenanceBatch}
	idempotency := &twicestore.IdempotencyPruneParams{Before: now, Limit: maintenanceBatch}
	steps := []struct {
		what string
		// prune deletes one batch and reports whether there may be more.
		prune func(context.Context) (more bool, err error)
	}{
		{"finished jobs", func(ctx context.Context) (bool, error) {
			res, err := p.store.JobDeleteFinished(ctx, jobs)
			if err != nil {
				return false, err
			}
			jobs.After = res.After // the next batch starts past what this one deleted
			return full(res.Deleted), nil
		}},
		{"finished workflows", func(ctx context.Context) (bool, error) {
			res, err := p.store.WorkflowPrune(ctx, workflows)
			if err != nil {
				return false, err
			}
			workflows.After = res.Next
			return res.Next != 0, nil
		}},
		{"finished batches", func(ctx context.Context) (bool, error) {
			res, err := p.store.BatchPrune(ctx, batches)
			if err != nil {
				return false, err
			}
			batches.After = res.Next
			return res.Next != 0, nil
		}},
		{"switch history", func(ctx context.Context) (bool, error) {
			res, err := p.store.ToggleHistoryPrune(ctx, &twicestore.ToggleHistoryPruneParams{
				Before: cutoff(p.cfg.ToggleHistoryRetention), Limit: maintenanceBatch})
			return err == nil && full(res.Deleted), err
		}},
		{"limit history", func(ctx context.Context) (bool, error) {
			res, err := p.store.LimitHistoryPrune(ctx, &twicestore.LimitHistoryPruneParams{
				Before: cutoff(p.cfg.ToggleHistoryRetention), Limit: maintenanceBatch})
			return err == nil && full(res.Deleted), err
		}},
		{"dead nodes", func(ctx context.Context) (bool, error) {
			res, err := p.store.NodePrune(ctx, &twicestore.NodePruneParams{
				HeartbeatBefore: now.Add(-deadNodeRetention), Limit: maintenanceBatch})
			return err == nil && full(res.Deleted), err
		}},
		{"expired idempotency keys", func(ctx context.Context) (bool, error) { // twicehttp's records
			res, err := p.store.IdempotencyPrune(ctx, idempotency)
			if err != nil {
				return false, err
			}
			idempotency.From = res.From
			return full(res.Deleted), nil
		}},
		{"step markers", func(ctx context.Context) (bool, error) { // twice.Step's, kept as long as markers
			res, err := p.store.StepPrune(ctx, stepMarkers)
			if err != nil {
				return false, err
			}
			stepMarkers.From = res.From
			return full(res.Deleted), nil
		}},
		{"markers", func(ctx context.Context) (bool, error) {
			res, err := p.store.MarkerPrune(ctx, markers)
			if err != nil {
				return false, err
			}
			markers.From = res.From
			return full(res.Deleted), nil
		}},
	}
	for _, s := range steps {
		for ctx.Err() == nil {
			more, err := s.prune(ctx)
			if err != nil {
				if ctx.Err() == nil {
					logger.WarnContext(ctx, "pruning "+s.what+" failed", logattr.Err, err)
				}
				break
			}
			if !more {
				break
			}
		}
	}
}

// nodeReporter reports this node alive with the kinds it handles, publishes
// them to the kind catalog (so tools without this binary's registry know
// them), and reports kinds with waiting jobs that no live node handles and
// queues with waiting jobs that no live node serves.
type nodeReporter struct {
	// c is the handle: the reporter publishes its catalog and asks its
	// admin API for orphans and stranded queues.
	c *Client
}

func newNodeReporter(c *Client) *nodeReporter { return &nodeReporter{c: c} }

func (r *nodeReporter) run(ctx context.Context) {
	c := r.c
	logger := c.logger.With(logattr.Component, "nodes")
	started := c.now()
	node := &twicetype.Node{
		ID: c.cfg.NodeID, Host: hostname(), PID: os.Getpid(),
		Kinds: c.registry.Kinds(), Queues: c.queueNames(), StartedAt: started,
	}
	var lastOrphanReport time.Time
	periodic.Run(ctx, nodeHeartbeatInterval, func(ctx context.Context) {
		node.HeartbeatAt = c.now()
		if err := c.store.NodeHeartbeat(ctx, &twicestore.NodeHeartbeatParams{Node: node}); err != nil {
			if ctx.Err() == nil {
				logger.WarnContext(ctx, "node heartbeat failed", logattr.Err, err)
			}
			return
		}
		if err := c.publishCatalog(ctx); err != nil && ctx.Err() == nil {
			logger.WarnContext(ctx, "publishing the kind catalog failed", logattr.Err, err)
		}
		if c.now().Sub(lastOrphanReport) < orphanReportInterval {
			return
		}
		now := c.now()
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
