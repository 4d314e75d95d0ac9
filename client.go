package twice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twicejobs/twice/twicestore"
)

// Client enqueues jobs and, once started, works the kinds in its registry.
type Client struct {
	store    twicestore.Store
	cfg      Config
	registry *Registry
	logger   *slog.Logger
	// worker is the running half: its loops, the jobs being worked.
	worker *worker
	// waits shares a finish listener among Wait calls (output.go).
	waits waitHub
	// clock tells the time the runtime stamps on what it writes (run and
	// finish times, lease ends, cutoffs): time.Now, or a test's clock.
	clock func() time.Time
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
	c := &Client{store: store, cfg: cfg, registry: cfg.Registry, logger: cfg.Logger, clock: time.Now}
	c.worker = newWorker(c)
	return c, nil
}

// now is the client's clock.
func (c *Client) now() time.Time { return c.clock() }

// Store returns the store the client works on.
func (c *Client) Store() twicestore.Store { return c.store }

// NodeID returns the name this client leases jobs under.
func (c *Client) NodeID() string { return c.cfg.NodeID }

// Start checks the database and starts working the registered kinds: the
// fetch loop, the lease heartbeat, the batched completer, the rescuer of
// expired leases, marker pruning and the node heartbeat. It fails fast when
// the database is unreachable or not migrated. The loops run until Stop;
// ctx only bounds the start-up checks.
func (c *Client) Start(ctx context.Context) error { return c.worker.start(ctx) }

// Stop shuts the worker down: it stops fetching and lets running jobs
// finish until ctx is done, and then returns nil: every outcome was
// written. When ctx ends first, Stop cancels the handlers' contexts with
// ErrShutdown and returns ctx.Err() at once, while the shutdown goes on:
// each job whose handler then returns an error is put back without
// spending an attempt, its outcome written within 10 s or given up (the
// job then runs again when its lease expires); Stopped is closed when
// that is over. A handler that ignores its cancelled context is logged as
// stuck and left to its lease. Stop may be called again, or concurrently.
func (c *Client) Stop(ctx context.Context) error {
	c.waits.close()
	return c.worker.stop(ctx)
}

// Stopped returns a channel that is closed once the client has stopped:
// nothing is fetched any more, the handlers returned (or were left to their
// leases as stuck), and their outcomes were written or given up. Before
// Stop it is open; for a client that was never started, Stop closes it at
// once.
func (c *Client) Stopped() <-chan struct{} { return c.worker.stopped }

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
		return c.worker.stopErr
	case <-ctx.Done():
		return ctx.Err()
	}
}
