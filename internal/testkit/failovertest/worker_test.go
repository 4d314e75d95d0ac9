package failovertest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/nodetest"
)

// Environment of a worker process.
const (
	envWorker  = "TWICE_FAILOVER_WORKER"  // set: this process is a worker
	envURL     = "TWICE_FAILOVER_URL"     // the pair's multi-host URL
	envNode    = "TWICE_FAILOVER_NODE"    // the worker's node id
	envEffects = "TWICE_FAILOVER_EFFECTS" // the directory external effects are appended to
)

// The job kinds, one per strategy. Each key is its kind and sequence
// number, so a job enqueued twice (a batch retried after its
// acknowledgement was lost) shares its markers with its twin, and the test
// finds every job by its key.

// creditArgs is Transactional: its ledger row commits with the job.
type creditArgs struct{ Seq int64 }

func (creditArgs) Kind() string             { return "failover.credit.v1" }
func (a creditArgs) IdempotencyKey() string { return fmt.Sprint("credit-", a.Seq) }

// emailArgs is ClaimAfter: its effect, a line in a file, is outside the
// database, like a sent email, so a lost completion can repeat it.
type emailArgs struct{ Seq int64 }

func (emailArgs) Kind() string             { return "failover.email.v1" }
func (a emailArgs) IdempotencyKey() string { return fmt.Sprint("email-", a.Seq) }

// chargeArgs is ClaimBefore: its effect, a line in a file, must never
// happen twice; an interrupted claim dead-letters the job instead.
type chargeArgs struct{ Seq int64 }

func (chargeArgs) Kind() string             { return "failover.charge.v1" }
func (a chargeArgs) IdempotencyKey() string { return fmt.Sprint("charge-", a.Seq) }

// noopArgs is None: nothing to converge.
type noopArgs struct{ Seq int64 }

func (noopArgs) Kind() string             { return "failover.noop.v1" }
func (a noopArgs) IdempotencyKey() string { return fmt.Sprint("noop-", a.Seq) }

// probeArgs measures enqueue-to-start latency: its handler records when it
// started, by the database's clock.
type probeArgs struct{ Seq int64 }

func (probeArgs) Kind() string             { return "failover.probe.v1" }
func (a probeArgs) IdempotencyKey() string { return fmt.Sprint("probe-", a.Seq) }

// Worker timing: a lease short enough that jobs whose outcome was lost in
// the failover come back within seconds, and a quick retry.
const (
	workerLease   = 5 * time.Second
	workerRescue  = time.Second
	workerBackoff = 100 * time.Millisecond
	maxAttempts   = 50
)

// effects appends external effects, one line each, to a file of the
// worker's own: a witness the failover cannot roll back.
type effects struct {
	mu sync.Mutex
	f  *os.File
}

func (e *effects) record(what string, seq int64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, err := fmt.Fprintf(e.f, "%s %d\n", what, seq)
	return err
}

// registry returns the kinds; a worker's handlers write through pool and
// eff, a producer's (never called) get nil.
func registry(pool *pgxpool.Pool, eff *effects) *twice.Registry {
	reg := twice.NewRegistry()
	opts := func(s twice.Strategy) *twice.KindOpts { return &twice.KindOpts{Strategy: s, MaxAttempts: maxAttempts} }
	twice.MustRegister(reg, twice.HandlerFunc[creditArgs](func(ctx context.Context, job *twice.Job[creditArgs]) error {
		tx, ok := job.Tx().(pgx.Tx)
		if !ok {
			return twice.Permanent(fmt.Errorf("no pgx transaction, got %T", job.Tx()))
		}
		_, err := tx.Exec(ctx, `INSERT INTO ledger (seq) VALUES ($1)`, job.Args.Seq)
		return err
	}), opts(twice.Transactional))
	twice.MustRegister(reg, twice.HandlerFunc[emailArgs](func(_ context.Context, job *twice.Job[emailArgs]) error {
		return eff.record("email", job.Args.Seq)
	}), opts(twice.ClaimAfter))
	twice.MustRegister(reg, twice.HandlerFunc[chargeArgs](func(_ context.Context, job *twice.Job[chargeArgs]) error {
		return eff.record("charge", job.Args.Seq)
	}), opts(twice.ClaimBefore))
	twice.MustRegister(reg, twice.HandlerFunc[noopArgs](func(context.Context, *twice.Job[noopArgs]) error {
		return nil
	}), opts(twice.None))
	twice.MustRegister(reg, twice.HandlerFunc[probeArgs](func(ctx context.Context, job *twice.Job[probeArgs]) error {
		_, err := pool.Exec(ctx, `INSERT INTO probes (seq) VALUES ($1) ON CONFLICT DO NOTHING`, job.Args.Seq)
		return err
	}), opts(twice.None))
	return reg
}

// runWorker is the whole life of a worker process (see nodetest.Worker).
// It is given the pair's multi-host URL and nothing else: finding the new
// primary after the failover is its own business.
func runWorker() int {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	node := os.Getenv(envNode)
	f, err := os.OpenFile(filepath.Join(os.Getenv(envEffects), node+".log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		logger.Error("worker: open effects file", "err", err)
		return 1
	}
	defer f.Close()
	return nodetest.Worker{
		URL:    os.Getenv(envURL),
		Logger: logger,
		Config: func(pool *pgxpool.Pool) twice.Config {
			return twice.Config{
				Registry:       registry(pool, &effects{f: f}),
				Queues:         []twice.QueueConfig{{Name: twice.QueueDefault, Concurrency: 20}},
				LeaseDuration:  workerLease,
				RescueInterval: workerRescue,
				Backoff:        func(int) time.Duration { return workerBackoff },
				NodeID:         node,
			}
		},
	}.Run()
}
