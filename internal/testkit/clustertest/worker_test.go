package clustertest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/nodetest"
)

// Environment of a worker process.
const (
	envWorker = "TWICE_CLUSTER_WORKER" // set: this process is a worker
	envURL    = "TWICE_CLUSTER_URL"    // the database (testDatabase.workerURL)
	envNode   = "TWICE_CLUSTER_NODE"   // the worker's node id
	envSlots  = "TWICE_CLUSTER_SLOTS"  // concurrency; 20 when unset
)

// creditArgs is a Transactional kind: its ledger row commits with the job.
type creditArgs struct{ CreditID int64 }

func (creditArgs) Kind() string             { return "cluster.credit.v1" }
func (a creditArgs) IdempotencyKey() string { return fmt.Sprint("credit-", a.CreditID) }

// emailArgs is a ClaimAfter kind: its effect is written outside the job's
// transaction, like a sent email, so a crash can duplicate it.
type emailArgs struct{ Seq int64 }

func (emailArgs) Kind() string             { return "cluster.email.v1" }
func (a emailArgs) IdempotencyKey() string { return fmt.Sprint("email-", a.Seq) }

// noopArgs is a kind whose handler does nothing, for benchmarks.
type noopArgs struct{ N int64 }

func (noopArgs) Kind() string { return "cluster.noop.v1" }

// workerLease is short so a killed worker's jobs come back quickly.
const workerLease = 2 * time.Second

// registry returns the kinds a worker runs; effects outside a job's
// transaction go through db.
func registry(db database) *twice.Registry {
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[creditArgs](func(ctx context.Context, job *twice.Job[creditArgs]) error {
		return txExec(ctx, job.Tx(), `INSERT INTO ledger (credit_id) VALUES ($1)`, job.Args.CreditID)
	}), &twice.KindOpts{Strategy: twice.Transactional, MaxAttempts: 50})
	twice.MustRegister(reg, twice.HandlerFunc[emailArgs](func(ctx context.Context, job *twice.Job[emailArgs]) error {
		err := db.Exec(ctx, `INSERT INTO sent_emails (email_id) VALUES ($1)`, job.Args.Seq)
		if err != nil && emailSent(ctx, db, job.Args.Seq) {
			// The connection was cut after the INSERT committed and before
			// its reply came: the email went out, as a sender that checks
			// its provider after a lost reply would find. Failing here
			// would send it again, a duplicate of the test's own making.
			return nil
		}
		return err
	}), &twice.KindOpts{Strategy: twice.ClaimAfter, MaxAttempts: 50})
	twice.MustRegister(reg, twice.HandlerFunc[noopArgs](func(context.Context, *twice.Job[noopArgs]) error {
		return nil
	}), &twice.KindOpts{Strategy: twice.None})
	registerLimited(reg, db, os.Getenv(envLimits))
	registerCompose(reg, db)
	registerSteps(reg, db)
	registerWaits(reg)
	registerUnique(reg)
	return reg
}

// logLevel is the workers' log level: warnings, and the info lines too
// for the runtime limits test, which reads each worker's log line of an
// applied override.
func logLevel() slog.Level {
	if os.Getenv(envLimits) == "gated" {
		return slog.LevelInfo
	}
	return slog.LevelWarn
}

// runWorker is the whole life of a worker process (see nodetest.Worker),
// or of a sender or an enqueuer when its environment says so.
func runWorker() int {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()}))
	b, err := getenvBackend()
	if err != nil {
		logger.Error("worker", "err", err)
		return 1
	}
	url := os.Getenv(envURL)
	db, err := b.openDB(context.Background(), url)
	if err != nil {
		logger.Error("worker: open the effects' pool", "err", err)
		return 1
	}
	defer db.Close()
	if os.Getenv(envSender) != "" {
		return runSender(b, url, db, logger)
	}
	if os.Getenv(envEnqueuer) != "" {
		return runEnqueuer(b, url, db, logger)
	}
	slots := 20
	if v, err := strconv.Atoi(os.Getenv(envSlots)); err == nil && v > 0 {
		slots = v
	}
	return nodetest.Worker{
		URL:    url,
		Logger: logger,
		Open:   b.openStore,
		Config: func(*pgxpool.Pool) twice.Config {
			return twice.Config{
				Registry:       registry(db),
				Queues:         []twice.QueueConfig{{Name: twice.QueueDefault, Concurrency: slots}},
				LeaseDuration:  workerLease,
				RescueInterval: 500 * time.Millisecond,
				PollInterval:   200 * time.Millisecond,
				Backoff:        func(int) time.Duration { return 50 * time.Millisecond },
				NodeID:         os.Getenv(envNode),
				Redeliver:      os.Getenv(envRedeliver) != "",
			}
		},
		Stop: func(c *twice.Client, ctx context.Context) error { return c.Shutdown(ctx, 10*time.Second) },
	}.Run()
}

// emailSent reports whether email seq is recorded as sent; false when it
// cannot tell. The cut kills the pool's connections one by one, so a read
// that meets one more dead connection is tried again, on another.
func emailSent(ctx context.Context, db database, seq int64) bool {
	for range 5 {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM sent_emails WHERE email_id = $1`, seq).Scan(&n); err == nil {
			return n > 0
		}
	}
	return false
}
