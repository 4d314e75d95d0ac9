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

// Client enqueues jobs and, once started, works the kinds in its registry.
type Client struct {
	store    twicestore.Store
	cfg      Config
	registry *Registry
	logger   *slog.Logger

	mu       sync.Mutex
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
	producer *producer.Producer
	complete *completer.Completer
	// fetchCancel stops fetching and the background loops; workCancel
	// cancels the handlers' contexts with ErrShutdown when the grace period
	// of Stop runs out.
	fetchCancel context.CancelFunc
	// leaseCancel stops the lease heartbeat, once running jobs are done.
	leaseCancel context.CancelFunc
	workCtx     context.Context
	workCancel  context.CancelCauseFunc
	loops       sync.WaitGroup

	// running holds the jobs being worked, for the lease heartbeat.
	running *runningJobs
	// exec runs the fetched jobs (execute.go).
	exec *executor

	switches *killSwitches
	// waits shares a finish listener among Wait calls (output.go).
	waits waitHub
}

// NewClient validates cfg and returns a client on store. It does not touch
// the database; Start does.
func NewClient(store twicestore.Store, cfg Config) (*Client, error) {
	if store == nil {
		return nil, errors.New("twice: NewClient: store is nil; open one with twicesqlite.Open")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("twice: invalid config: %w", err)
	}
	warnUnservedQueues(cfg)
	c := &Client{
		store:    store,
		cfg:      cfg,
		registry: cfg.Registry,
		logger:   cfg.Logger,
		running:  newRunningJobs(),
		stopped:  make(chan struct{}),
		hurried:  make(chan struct{}),
	}
	return c, nil
}

// Store returns the store the client works on.
func (c *Client) Store() twicestore.Store { return c.store }

// NodeID returns the name this client leases jobs under.
func (c *Client) NodeID() string { return c.cfg.NodeID }

// Start checks the database and starts working the registered kinds: the
// fetch loop, the lease heartbeat, the batched completer, the rescuer of
// expired leases, marker pruning and the node heartbeat. It fails fast when
// the database is unreachable or not migrated. The loops run until Stop;
// ctx only bounds the start-up checks.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return errors.New("twice: client already started")
	}
	if c.stopping {
		return errors.New("twice: client stopped; make a new one with NewClient")
	}
	if err := c.store.Ping(ctx); err != nil {
		return fmt.Errorf("twice: start: database unreachable: %w", err)
	}
	applied, latest, err := c.store.SchemaVersion(ctx)
	if err != nil {
		return fmt.Errorf("twice: start: %w", err)
	}
	if applied < latest {
		return fmt.Errorf("twice: start: database schema is at version %d, this binary needs %d: run `twice migrate`: %w",
			applied, latest, twicestore.ErrNotMigrated)
	}
	if applied > latest {
		return fmt.Errorf("twice: start: database schema is at version %d, newer than this binary's %d: upgrade twice: %w",
			applied, latest, twicestore.ErrSchemaTooNew)
	}
	if err := c.loadKillSwitches(ctx); err != nil {
		return fmt.Errorf("twice: start: %w", err)
	}
	c.warnUnknownToggleKeys(ctx, "startup", c.switchKeys())
	if err := c.publishCatalog(ctx); err != nil {
		c.logger.WarnContext(ctx, "publishing the kind catalog failed; the node heartbeat retries", logattr.Component, "nodes", logattr.Err, err)
	}
	c.started = true

	bg, cancel := context.WithCancel(context.Background())
	c.fetchCancel = cancel
	c.workCtx, c.workCancel = context.WithCancelCause(context.Background())
	c.abortCtx, c.abort = context.WithCancel(context.Background())
	c.complete = completer.New(c.store, c.logger, 0)
	c.complete.OnInserted = c.notify // continuations, released workflow tasks and batch callbacks are due now
	c.complete.Start(c.abortCtx)
	c.exec = &executor{
		store: c.store, registry: c.registry, cfg: &c.cfg, logger: c.logger,
		complete: c.complete, running: c.running, enabled: c.kindEnabled, workCtx: c.workCtx,
		slotFreed: c.limitSlotFreed, childParams: c.childParams,
	}

	queues := make([]producer.Queue, len(c.cfg.Queues))
	for i, q := range c.cfg.Queues {
		queues[i] = producer.Queue{Name: q.Name, Concurrency: q.Concurrency}
	}
	c.producer = producer.New(producer.Config{
		Exec:         c.store,
		Queues:       queues,
		RoundRobin:   c.cfg.QueueOrder == RoundRobin,
		MaxWorkers:   c.cfg.MaxWorkers,
		Kinds:        c.enabledKinds,
		Node:         c.cfg.NodeID,
		Lease:        c.cfg.LeaseDuration,
		PollInterval: c.cfg.PollInterval,
		FetchLimit:   c.cfg.FetchLimit,
		Logger:       c.logger,
		Peek:         c.fetchPeekHandlers(),
		Limits:       c.registry.limits(),
		Run:          c.exec.Execute,
	})
	c.goLoop(func() { c.producer.Run(bg) })
	leaseCtx, leaseCancel := context.WithCancel(context.Background())
	c.leaseCancel = leaseCancel
	c.goLoop(func() { c.heartbeatLeases(leaseCtx) })
	c.goLoop(func() { c.rescueLoop(bg) })
	c.goLoop(func() { c.pruneLoop(bg) })
	c.goLoop(func() { c.nodeLoop(bg) })
	c.goLoop(func() { c.storeSwitchLoop(bg) })
	c.goLoop(func() { c.schedulerLoop(bg) })
	if c.cfg.TogglesFile != "" {
		c.goLoop(func() { c.fileSwitchLoop(bg) })
	}
	if l, ok := twicestore.As[twicestore.CancelListener](c.store); ok && len(c.registry.Kinds()) > 0 {
		c.goLoop(func() { c.listenCancels(leaseCtx, l) })
	} else if len(c.registry.Kinds()) > 0 {
		c.goLoop(func() { c.pollCancels(leaseCtx) })
	}
	if l, ok := twicestore.As[twicestore.InsertListener](c.store); ok && len(c.registry.Kinds()) > 0 {
		c.goLoop(func() { c.listenInserts(bg, l) })
	}
	c.logger.InfoContext(ctx, "twice worker started",
		logattr.Component, "client", logattr.Node, c.cfg.NodeID, "kinds", c.registry.Kinds())
	return nil
}

func (c *Client) goLoop(fn func()) {
	c.loops.Add(1)
	go func() {
		defer c.loops.Done()
		fn()
	}()
}

// stuckWait is how long the shutdown waits for handlers to return after
// cancelling them, before it names them as stuck and leaves their jobs to
// their leases.
const stuckWait = 5 * time.Second

// Stop shuts the worker down: it stops fetching and lets running jobs
// finish until ctx is done. When ctx ends first, Stop cancels the handlers'
// contexts with ErrShutdown and returns ctx.Err() at once; the shutdown
// goes on without it: each job whose handler then returns an error is put
// back in its queue without spending an attempt, and its outcome is
// written within outcomeWriteTimeout (10 s) or given up, the job then
// running again when its lease expires. Stopped is closed when all of that
// is over; a program that wants the put-backs recorded before it exits
// waits on Stopped for a few seconds after Stop. Stop returns nil when the
// shutdown finished before ctx ended: every outcome was then written. A
// handler that ignores its cancelled context is logged as stuck and left to
// its lease. Stop may be called again, or concurrently: each call waits
// for the same shutdown, bounded by its own ctx.
func (c *Client) Stop(ctx context.Context) error {
	c.waits.close()
	c.mu.Lock()
	if !c.stopping {
		c.stopping = true
		if c.started {
			go c.shutdown()
		} else {
			close(c.stopped)
		}
	}
	c.mu.Unlock()
	select {
	case <-c.stopped:
		return c.stopErr
	case <-ctx.Done():
	}
	select {
	case <-c.stopped: // both ready: the shutdown did finish
		return c.stopErr
	default:
	}
	c.hurry()
	return ctx.Err()
}

// Stopped returns a channel that is closed once the client has stopped:
// nothing is fetched any more, the handlers returned (or were left to their
// leases as stuck), and their outcomes were written or given up. Before
// Stop it is open; for a client that was never started, Stop closes it at
// once.
func (c *Client) Stopped() <-chan struct{} { return c.stopped }

// Shutdown stops the client as a process that was told to exit does: it
// stops fetching, gives running jobs grace to finish, then cancels the
// handlers still running (ErrShutdown) and waits until their jobs were put
// back in their queues without spending an attempt — the end of a grace
// period is how a shutdown is meant to go, not a failure. It returns nil
// once every outcome was recorded, the shutdown's own error if it had one,
// and ctx.Err() when ctx ends first; give ctx room beyond grace for the
// put-backs (outcomes still unwritten 10 s after the grace are given up).
// Keep grace shorter than the time your orchestrator waits between SIGTERM
// and SIGKILL.
func (c *Client) Shutdown(ctx context.Context, grace time.Duration) error {
	gctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	err := c.Stop(gctx)
	if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	// The grace ran out: Stop cancelled the handlers; wait for their jobs
	// to be put back.
	select {
	case <-c.Stopped():
		return c.stopErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// hurry ends the grace period of a shutdown: the handlers' contexts are
// cancelled with ErrShutdown, and outcomes still unwritten after
// outcomeWriteTimeout are given up, so a store that hangs cannot hold the
// shutdown for ever.
func (c *Client) hurry() {
	c.hurryOnce.Do(func() {
		c.workCancel(ErrShutdown)
		close(c.hurried)
		time.AfterFunc(outcomeWriteTimeout, c.abort)
	})
}

// shutdown is Stop's work, on a goroutine of its own so that every Stop
// call can return when its ctx ends.
func (c *Client) shutdown() {
	var stopErr error
	defer func() {
		c.stopErr = stopErr
		close(c.stopped)
	}()
	c.fetchCancel()
	drained := make(chan struct{})
	go func() {
		c.producer.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-c.hurried:
		t := time.NewTimer(stuckWait)
		select {
		case <-drained:
		case <-t.C:
			c.logStuck()
			stopErr = fmt.Errorf("twice: stop: %d jobs did not return after cancellation; their leases will expire", c.producer.Running())
		}
		t.Stop()
	}
	c.leaseCancel()
	c.loops.Wait()
	c.complete.Stop()
	c.workCancel(ErrShutdown)
	rmCtx, cancel := context.WithTimeout(c.abortCtx, 5*time.Second)
	defer cancel()
	if err := c.store.NodeRemove(rmCtx, &twicestore.NodeRemoveParams{ID: c.cfg.NodeID}); err != nil {
		c.logger.Warn("removing node record failed", logattr.Component, "client", logattr.Err, err)
	}
	c.abort() // nothing is written any more; ends the abort timer's context
	c.logger.Info("twice worker stopped", logattr.Component, "client", logattr.Node, c.cfg.NodeID)
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

// listenInserts wakes the fetch loop when another process inserts jobs into
// a queue this worker serves. The wake-up is only a hint; the poll timer
// covers a lost one.
func (c *Client) listenInserts(ctx context.Context, l twicestore.InsertListener) {
	served := make(map[string]bool, len(c.cfg.Queues))
	for _, q := range c.cfg.Queues {
		served[q.Name] = true
	}
	err := l.ListenInserts(ctx, func(queue string) {
		if served[queue] {
			c.producer.Notify()
		}
	})
	if err != nil && ctx.Err() == nil {
		c.logger.Warn("listening for inserted jobs stopped; polling only", logattr.Component, "listener", logattr.Err, err)
	}
}
