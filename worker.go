package twice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/twicejobs/twice/internal/completer"
	"github.com/twicejobs/twice/internal/logattr"
	"github.com/twicejobs/twice/internal/producer"
	"github.com/twicejobs/twice/twicestore"
)

// worker is the running half of a Client: what exists only between Start
// and Stop. It owns the fetch loop (the producer), the executor and the
// batched completer, the jobs being worked, and the background loops, each
// a small value with run(ctx) in a worker_*.go file of its own. A Client
// holds one from NewClient on, so Stop and Stopped work on a client that
// was never started.
type worker struct {
	// c is the handle: store, config, registry and logger, and the admin
	// and enqueue API that some loops call (the scheduler enqueues, the
	// node reporter asks for orphans).
	c *Client

	mu       sync.Mutex // guards started, stopping and producer
	started  bool
	stopping bool
	// stopped is closed when the shutdown is over (Stopped); stopErr is
	// set before.
	stopped chan struct{}
	stopErr error
	// hurried is closed when a Stop's ctx ended: the grace period is over.
	hurried   chan struct{}
	hurryOnce sync.Once
	// abortCtx, cancelled by abort, bounds the writes of the shutdown
	// (the completer's included) once the grace period is over.
	abortCtx context.Context
	abort    context.CancelFunc
	// fetchCancel stops fetching and the background loops; leaseCancel
	// stops the lease heartbeat and the cancel watcher once the running
	// jobs are done; workCancel cancels the handlers' contexts with
	// ErrShutdown when the grace period of Stop runs out.
	fetchCancel context.CancelFunc
	leaseCancel context.CancelFunc
	workCtx     context.Context
	workCancel  context.CancelCauseFunc
	loops       sync.WaitGroup

	producer *producer.Producer
	complete *completer.Completer
	exec     *executor
	// running holds the jobs being worked, for the lease heartbeat, the
	// cancel watcher and the admin API's cancels.
	running  *runningJobs
	switches *killSwitches
	// limits are the kinds' limits and the queues' concurrency in force,
	// overrides applied.
	limits *runtimeLimits
}

func newWorker(c *Client) *worker {
	return &worker{
		c:       c,
		running: newRunningJobs(),
		stopped: make(chan struct{}),
		hurried: make(chan struct{}),
	}
}

// start checks the database, loads the kill switches, and starts the
// worker's parts one per line.
func (w *worker) start(ctx context.Context) error {
	c := w.c
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("twice: client already started")
	}
	if w.stopping {
		return errors.New("twice: client stopped; make a new one with NewClient")
	}
	if err := checkDatabase(ctx, c.store); err != nil {
		return fmt.Errorf("twice: start: %w", err)
	}
	w.switches = newKillSwitches(c, w.notify)
	if err := w.switches.load(ctx); err != nil {
		return fmt.Errorf("twice: start: %w", err)
	}
	w.switches.warnUnknown(ctx, "startup", w.switches.keys())
	w.limits = newRuntimeLimits(c)
	if err := w.limits.load(ctx); err != nil {
		return fmt.Errorf("twice: start: %w", err)
	}
	if err := c.guardArgs(ctx); err != nil {
		return fmt.Errorf("twice: start: %w", err)
	}
	if err := c.publishCatalog(ctx); err != nil {
		c.logger.WarnContext(ctx, "publishing the kind catalog failed; the node heartbeat retries", logattr.Component, "nodes", logattr.Err, err)
	}
	w.started = true

	bg, cancel := context.WithCancel(context.Background())
	w.fetchCancel = cancel
	leaseCtx, leaseCancel := context.WithCancel(context.Background())
	w.leaseCancel = leaseCancel
	w.workCtx, w.workCancel = context.WithCancelCause(context.Background())
	w.abortCtx, w.abort = context.WithCancel(context.Background())
	w.complete = completer.New(c.store, c.logger, 0)
	w.complete.OnInserted = w.notify // continuations, released workflow tasks and batch callbacks are due now
	w.complete.Start(w.abortCtx)
	w.exec = &executor{
		store: c.store, registry: c.registry, cfg: &c.cfg, logger: c.logger,
		complete: w.complete, running: w.running, enabled: w.switches.kindEnabled, workCtx: w.workCtx,
		slotFreed: w.limitSlotFreed, childParams: c.childParams, now: c.now,
	}
	w.producer = producer.New(w.producerConfig())
	w.limits.attach(w.producer)
	hasKinds := len(c.registry.Kinds()) > 0

	w.goLoop(bg, w.producer.Run)
	w.goLoop(leaseCtx, newLeaseKeeper(c, w.running).run)
	if hasKinds {
		w.goLoop(leaseCtx, newCancelWatcher(c, w.running).run)
		w.goLoop(bg, newInsertWaker(c, w.notify).run)
	}
	w.goLoop(bg, newRescuer(c, w.notify).run)
	w.goLoop(bg, (&waitTimers{store: c.store, logger: c.logger.With(logattr.Component, "wait-timers"), wake: w.notify, now: c.now}).run)
	w.goLoop(bg, newPruner(c).run)
	if r := newRotator(c); r != nil {
		w.goLoop(bg, r.run)
	}
	w.goLoop(bg, newNodeReporter(c).run)
	switchWatcher := newStoreSwitchWatcher(c, w.switches)
	switchWatcher.alsoRead = w.limits.refresh // the overrides are read with the switches
	w.goLoop(bg, switchWatcher.run)
	if c.cfg.TogglesFile != "" {
		w.goLoop(bg, newFileSwitchWatcher(w.switches).run)
	}
	w.goLoop(bg, newScheduler(c, w.switches.kindEnabled, w.notify).run)
	c.logger.InfoContext(ctx, "twice worker started",
		logattr.Component, "client", logattr.Node, c.cfg.NodeID, "kinds", c.registry.Kinds())
	return nil
}

// checkDatabase fails the start fast when the database is unreachable or
// its schema is not the one this binary was built for.
func checkDatabase(ctx context.Context, store twicestore.Store) error {
	if err := store.Ping(ctx); err != nil {
		return fmt.Errorf("database unreachable: %w", err)
	}
	applied, latest, err := store.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	if applied < latest {
		return fmt.Errorf("database schema is at version %d, this binary needs %d: run `twice migrate`: %w",
			applied, latest, twicestore.ErrNotMigrated)
	}
	if applied > latest {
		return fmt.Errorf("database schema is at version %d, newer than this binary's %d: upgrade twice: %w",
			applied, latest, twicestore.ErrSchemaTooNew)
	}
	return nil
}

// producerConfig is the fetch loop's configuration, from the client's.
func (w *worker) producerConfig() producer.Config {
	cfg := &w.c.cfg
	queues := make([]producer.Queue, len(cfg.Queues))
	for i, q := range cfg.Queues {
		queues[i] = producer.Queue{Name: q.Name, Concurrency: q.Concurrency}
	}
	return producer.Config{
		Exec:       w.c.store,
		Queues:     queues,
		RoundRobin: cfg.QueueOrder == RoundRobin,
		MaxWorkers: cfg.MaxWorkers,
		// The overrides of the queues' concurrency change it with them.
		MaxWorkersFromQueues: cfg.maxWorkersFromQueues,
		Kinds:                w.switches.enabledKinds,
		Node:                 cfg.NodeID,
		Lease:                cfg.LeaseDuration,
		PollInterval:         cfg.PollInterval,
		FetchLimit:           cfg.FetchLimit,
		Logger:               w.c.logger,
		Peek:                 w.c.fetchPeekHandlers(),
		Limits:               w.c.registry.limits(),
		Run:                  w.exec.Execute,
	}
}

// goLoop runs one of the worker's loops until ctx ends; the shutdown
// waits for all of them.
func (w *worker) goLoop(ctx context.Context, run func(context.Context)) {
	w.loops.Add(1)
	go func() {
		defer w.loops.Done()
		run(ctx)
	}()
}

// notify wakes the fetch loop, if it runs.
func (w *worker) notify() {
	w.mu.Lock()
	p := w.producer
	w.mu.Unlock()
	if p != nil {
		p.Notify()
	}
}

// limitSlotFreed wakes the producer when a job of a kind with a
// concurrency limit (compiled or overridden) has its outcome recorded and the last fetch left jobs
// throttled: its slot is free now, and they may be waiting for it. A rate
// limit's window frees with time, not with outcomes, so a rate-only kind
// wakes nothing; nor does any kind when nothing was held back (a wake per
// outcome would double the fetches of a burn-down).
func (w *worker) limitSlotFreed(kind string) {
	if !w.limits.concurrencyLimited(kind) {
		return
	}
	w.producer.NotifyThrottled()
}

// stuckWait is how long the shutdown waits for handlers to return after
// cancelling them, before it names them as stuck and leaves their jobs to
// their leases.
const stuckWait = 5 * time.Second

// stop starts the shutdown once and waits for it until ctx ends; see
// Client.Stop.
func (w *worker) stop(ctx context.Context) error {
	w.mu.Lock()
	if !w.stopping {
		w.stopping = true
		if w.started {
			go w.shutdown()
		} else {
			close(w.stopped)
		}
	}
	w.mu.Unlock()
	select {
	case <-w.stopped:
		return w.stopErr
	case <-ctx.Done():
	}
	select {
	case <-w.stopped: // both ready: the shutdown did finish
		return w.stopErr
	default:
	}
	w.hurry()
	return ctx.Err()
}

// hurry ends the grace period of a shutdown: the handlers' contexts are
// cancelled with ErrShutdown, and outcomes still unwritten after
// outcomeWriteTimeout are given up, so a store that hangs cannot hold the
// shutdown for ever.
func (w *worker) hurry() {
	w.hurryOnce.Do(func() {
		w.workCancel(ErrShutdown)
		close(w.hurried)
		time.AfterFunc(outcomeWriteTimeout, w.abort)
	})
}

// shutdown is Stop's work, on a goroutine of its own so that every Stop
// call can return when its ctx ends.
func (w *worker) shutdown() {
	c := w.c
	var stopErr error
	defer func() {
		w.stopErr = stopErr
		close(w.stopped)
	}()
	w.fetchCancel()
	drained := make(chan struct{})
	go func() {
		w.producer.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-w.hurried:
		t := time.NewTimer(stuckWait)
		select {
		case <-drained:
		case <-t.C:
			w.logStuck()
			stopErr = fmt.Errorf("twice: stop: %d jobs did not return after cancellation; their leases will expire", w.producer.Running())
		}
		t.Stop()
	}
	w.leaseCancel()
	w.loops.Wait()
	w.complete.Stop()
	w.workCancel(ErrShutdown)
	rmCtx, cancel := context.WithTimeout(w.abortCtx, 5*time.Second)
	defer cancel()
	if err := c.store.NodeRemove(rmCtx, &twicestore.NodeRemoveParams{ID: c.cfg.NodeID}); err != nil {
		c.logger.Warn("removing node record failed", logattr.Component, "client", logattr.Err, err)
	}
	w.abort() // nothing is written any more; ends the abort timer's context
	c.logger.Info("twice worker stopped", logattr.Component, "client", logattr.Node, c.cfg.NodeID)
}

// logStuck names the jobs whose handlers did not return after Stop
// cancelled them.
func (w *worker) logStuck() {
	for _, row := range w.running.rows() {
		jobLogger(w.c.logger, row).Error("job handler ignores its cancelled context; leaving it to its lease", logattr.Component, "client")
	}
}

// insertWaker wakes the fetch loop when another process inserts jobs into
// a queue this worker serves. The wake-up is only a hint; the poll timer
// covers a lost one. On a store that cannot notify inserts it does nothing.
type insertWaker struct {
	store  twicestore.Store
	served map[string]bool
	wake   func()
	logger *slog.Logger
}

func newInsertWaker(c *Client, wake func()) *insertWaker {
	served := make(map[string]bool, len(c.cfg.Queues))
	for _, q := range c.cfg.Queues {
		served[q.Name] = true
	}
	return &insertWaker{store: c.store, served: served, wake: wake, logger: c.logger}
}

func (i *insertWaker) run(ctx context.Context) {
	l, ok := twicestore.As[twicestore.InsertListener](i.store)
	if !ok {
		return
	}
	err := l.ListenInserts(ctx, func(queue string) {
		if i.served[queue] {
			i.wake()
		}
	})
	if err != nil && ctx.Err() == nil {
		i.logger.Warn("listening for inserted jobs stopped; polling only", logattr.Component, "listener", logattr.Err, err)
	}
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}
