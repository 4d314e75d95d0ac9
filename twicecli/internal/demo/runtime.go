package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// Options configure Run and RunOnce.
type Options struct {
	// DB holds the jobs and the demo's tables: a SQLite file, a
	// postgres:// URL whose database (and search_path schema) exists, or
	// a mysql:// URL whose database exists.
	DB string
	// ObjectsDir is where watermarked images are written. Defaults to
	// DefaultObjectsDir(DB).
	ObjectsDir string
	// Out receives the demo's narration and report. Defaults to io.Discard.
	Out io.Writer
	// Logger receives the runtime's and the handlers' logs. Defaults to
	// slog.Default().
	Logger *slog.Logger
	// Interval is how often Run produces something. Defaults to 700ms.
	Interval time.Duration
	// Redeliver delivers every job a second time (twice.Config.Redeliver):
	// the demo's handlers must converge under it too.
	Redeliver bool
	// HTTPAddr is where Run serves the demo's HTTP API (POST /signups
	// behind the Idempotency-Key middleware, GET /users/{id}). Defaults to
	// none.
	HTTPAddr string
	// HTTPOptional makes an HTTPAddr that cannot be listened on (a port
	// taken) a note on Out rather than an error: the demo goes on without
	// its API. The CLI sets it for its default address.
	HTTPOptional bool

	// Observer, when set, makes the observer of the demo's runtime (its
	// metrics) for the demo's store.
	Observer func(store twicestore.Store) twice.Observer
	// Started, when set, is called once the worker has started, with the
	// demo's store (to serve the dashboard on it); ctx ends when the demo
	// stops. An error stops the demo.
	Started func(ctx context.Context, store twicestore.Store) error

	// nonIdempotentWatermark registers a broken watermark handler, for
	// tests that show the checker catching divergence.
	nonIdempotentWatermark bool
	// beforeCheck runs after the scenario and before the checker, for
	// tests that tamper with the effects.
	beforeCheck func(ctx context.Context, a *App) error
}

func (o Options) withDefaults() Options {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Interval <= 0 {
		o.Interval = 700 * time.Millisecond
	}
	return o
}

// The demo runs with short leases and backoffs so that a crashed job comes
// back, and a failed one is retried, within seconds.
const (
	demoLease          = 2 * time.Second
	demoRescueInterval = time.Second
	demoPollInterval   = 200 * time.Millisecond
	demoMaxAttempts    = 5
	demoStopGrace      = 5 * time.Second
)

// demoBackoff waits 200ms, 400ms, … between attempts.
func demoBackoff(attempt int) time.Duration { return time.Duration(attempt) * 200 * time.Millisecond }

// open opens the App for opts and a client working its kinds through the
// fault-injecting store.
func open(ctx context.Context, opts Options) (*App, *twice.Client, error) {
	a, err := Open(ctx, opts.DB, opts.ObjectsDir)
	if err != nil {
		return nil, nil, err
	}
	a.nonIdempotentWatermark = opts.nonIdempotentWatermark
	a.faults.logger = opts.Logger
	reg, err := NewRegistry(a)
	if err != nil {
		_ = a.Close()
		return nil, nil, err
	}
	client, err := twice.NewClient(a.Store(), twice.Config{
		Registry:       reg,
		LeaseDuration:  demoLease,
		RescueInterval: demoRescueInterval,
		PollInterval:   demoPollInterval,
		MaxAttempts:    demoMaxAttempts,
		Backoff:        demoBackoff,
		Logger:         opts.Logger,
		Redeliver:      opts.Redeliver,
		Observer:       observer(opts, a.Store()),
		OnDead: func(ctx context.Context, dead twice.DeadJob) {
			opts.Logger.ErrorContext(ctx, "demo: a job was dead-lettered; this is where an alert would page someone",
				"job_id", dead.Job.ID, "kind", dead.Job.Kind, "err", dead.Err)
		},
	})
	if err != nil {
		_ = a.Close()
		return nil, nil, err
	}
	return a, client, nil
}

func observer(opts Options, store twicestore.Store) twice.Observer {
	if opts.Observer == nil {
		return nil
	}
	return opts.Observer(store)
}

// stop stops the client, giving running jobs a short grace period.
func stop(ctx context.Context, client *twice.Client) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), demoStopGrace+20*time.Second)
	defer cancel()
	return client.Shutdown(sctx, demoStopGrace)
}

// waitSettled polls the store until none of the jobs is available or
// running (each has completed, died or been discarded), or the timeout
// passes.
func (a *App) waitSettled(ctx context.Context, ids []int64, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		res, err := a.store.JobList(ctx, &twicestore.JobListParams{Filter: twicestore.JobFilter{IDs: ids}})
		if err != nil {
			return fmt.Errorf("wait for jobs: %w", err)
		}
		var pending []string
		for _, j := range res.Jobs {
			if !j.State.Finished() {
				pending = append(pending, fmt.Sprintf("%d (%s, %s)", j.ID, j.Kind, j.State))
			}
		}
		if len(pending) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("jobs still unfinished after %s: %s", timeout, strings.Join(pending, ", "))
		case <-tick.C:
		}
	}
}

// jobs returns the stored jobs with the given ids.
func (a *App) jobs(ctx context.Context, ids []int64) ([]*twicetype.JobRow, error) {
	res, err := a.store.JobList(ctx, &twicestore.JobListParams{Filter: twicestore.JobFilter{IDs: ids}})
	if err != nil {
		return nil, err
	}
	return res.Jobs, nil
}
