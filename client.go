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
	stopped  bool
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
	c := &Client{
		store:    store,
		cfg:      cfg,
		registry: cfg.Registry,
		logger:   cfg.Logger,
		running:  newRunningJobs(),
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
	c.started = true

	bg, cancel := context.WithCancel(context.Background())
	c.fetchCancel = cancel
	c.workCtx, c.workCancel = context.WithCancelCause(context.Background())
	c.complete = completer.New(c.store, c.logger, 0)
	c.complete.Start(context.Background())
	c.exec = &executor{
		store: c.store, registry: c.registry, cfg: &c.cfg, logger: c.logger,
		complete: c.complete, running: c.running, enabled: c.kindEnabled, workCtx: c.workCtx,
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

// Stop shuts the worker down: it stops fetching, lets running jobs finish
// until ctx is done, then cancels their contexts with ErrShutdown and puts
// each job that returns an error back in its queue without spending an
// attempt. Outcomes are written before Stop returns. A handler that ignores
// its cancelled context is logged as stuck and left to its lease.
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	if !c.started || c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	c.mu.Unlock()

	c.fetchCancel()
	drained := make(chan struct{})
	go func() {
		c.producer.Wait()
		close(drained)
	}()
	var stopErr error
	select {
	case <-drained:
	case <-ctx.Done():
		c.workCancel(ErrShutdown)
		select {
		case <-drained:
		case <-time.After(5 * time.Second):
			c.logStuck()
			stopErr = fmt.Errorf("twice: stop: %d jobs did not return after cancellation; their leases will expire", c.producer.Running())
		}
	}
	c.leaseCancel()
	c.loops.Wait()
	c.complete.Stop()
	c.workCancel(ErrShutdown)
	rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := c.store.NodeRemove(rmCtx, &twicestore.NodeRemoveParams{ID: c.cfg.NodeID}); err != nil {
		c.logger.WarnContext(ctx, "removing node record failed", logattr.Component, "client", logattr.Err, err)
	}
	c.logger.InfoContext(ctx, "twice worker stopped", logattr.Component, "client", logattr.Node, c.cfg.NodeID)
	return stopErr
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
