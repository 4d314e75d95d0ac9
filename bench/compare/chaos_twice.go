package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicepg"
)

// chaosTwiceArgs is the chaos job on twice: N names its effect key, which is
// also its idempotency key, so the marker can absorb a redelivery.
type chaosTwiceArgs struct {
	N int64 `json:"n"`
}

// Kind names the chaos job's kind.
func (chaosTwiceArgs) Kind() string { return "chaos.ledger.v1" }

// IdempotencyKey is the job's effect key.
func (a chaosTwiceArgs) IdempotencyKey() string { return effectKey(a.N) }

// chaosTwiceRescueInterval is how often twice's workers look for expired
// leases (its default is 30 s). River's rescuer has no such setting: it
// runs when a client becomes the leader, and every 30 s after.
const chaosTwiceRescueInterval = time.Second

// chaosTwice is the parent's view of twice's chaos schema.
type chaosTwice struct {
	admin *pgxpool.Pool // the -pg database, no schema
	pool  *pgxpool.Pool // in the schema
	url   string
	mode  chaosMode
}

func newChaosTwice(ctx context.Context, pg, u string, m chaosMode) (*chaosTwice, error) {
	admin, err := pgxpool.New(ctx, pg)
	if err != nil {
		return nil, err
	}
	return &chaosTwice{admin: admin, url: u, mode: m}, nil
}

func (c *chaosTwice) close() {
	if c.pool != nil {
		c.pool.Close()
	}
	c.admin.Close()
}

func (c *chaosTwice) prepare(ctx context.Context, jobs int) error {
	schema := chaosSchema("twice")
	if err := chaosExec(ctx, c.admin, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`, `CREATE SCHEMA `+schema); err != nil {
		return err
	}
	store, err := twicepg.Open(ctx, c.url) // migrates the new schema
	if err != nil {
		return err
	}
	defer func() { _ = store.Close() }()
	if c.pool, err = pgxpool.New(ctx, c.url); err != nil {
		return err
	}
	if err := chaosExec(ctx, c.pool, ledgerDDL("twice_jobs")...); err != nil {
		return err
	}
	producer, err := twice.NewClient(store, twice.Config{})
	if err != nil {
		return err
	}
	if err := inBatches(jobs, 1000, func(i int) twice.EnqueueParams {
		return twice.EnqueueParams{Args: chaosTwiceArgs{N: int64(i) + 1}}
	}, func(b []twice.EnqueueParams) error {
		_, err := producer.EnqueueMany(ctx, b)
		return err
	}); err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	return chaosExec(ctx, c.pool, `VACUUM ANALYZE twice_jobs`)
}

func (c *chaosTwice) runningOn(ctx context.Context, node string) (int, error) {
	var n int
	err := c.pool.QueryRow(ctx, `SELECT count(*) FROM twice_jobs WHERE state = 'running' AND attempted_by = $1`, node).Scan(&n)
	return n, err
}

func (c *chaosTwice) unfinished(ctx context.Context) (int, error) {
	var n int
	err := c.pool.QueryRow(ctx, `SELECT count(*) FROM twice_jobs WHERE state IN ('available', 'running')`).Scan(&n)
	return n, err
}

// tally: a dead job whose error says the effect may have happened (the
// text of ClaimBefore's dead letters, twice.ErrEffectUncertain's among
// them) needs a human; any other dead, discarded or cancelled job, and any
// job whose row is gone, is lost.
func (c *chaosTwice) tally(ctx context.Context, jobs int) (*chaosTally, error) {
	t := &chaosTally{}
	if err := c.pool.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE state = 'completed'),
			count(*) FILTER (WHERE state IN ('available', 'running')),
			count(*) FILTER (WHERE state = 'dead' AND errors::text LIKE '%the effect may have happened%')
		FROM twice_jobs`).Scan(&t.completed, &t.unfinished, &t.needsHuman); err != nil {
		return nil, fmt.Errorf("tally: %w", err)
	}
	t.lost = jobs - t.completed - t.unfinished - t.needsHuman
	if err := c.pool.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE state = 'completed' AND NOT EXISTS (SELECT 1 FROM chaos_ledger l WHERE l.effect_key = j.idempotency_key)),
			count(*) FILTER (WHERE state = 'dead' AND errors::text LIKE '%the effect may have happened%'
				AND EXISTS (SELECT 1 FROM chaos_ledger l WHERE l.effect_key = j.idempotency_key))
		FROM twice_jobs j`).Scan(&t.missing, &t.needsHumanApplied); err != nil {
		return nil, fmt.Errorf("tally: %w", err)
	}
	return t, commonTally(ctx, c.pool, t)
}

// chaosTwiceWorker is a twice worker process of mode m, until ctx is done.
func chaosTwiceWorker(ctx context.Context, u string, m chaosMode, opts chaosOptions) error {
	strategy, err := twice.ParseStrategy(m.strategy)
	if err != nil {
		return err
	}
	store, err := twicepg.Open(ctx, u)
	if err != nil {
		return err
	}
	defer func() { _ = store.Close() }()
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		return err
	}
	defer pool.Close()
	half := opts.work / 2
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[chaosTwiceArgs](func(ctx context.Context, job *twice.Job[chaosTwiceArgs]) error {
		key := effectKey(job.Args.N)
		if strategy == twice.Transactional {
			// No transaction is held open across a sleep: all the
			// handler's time comes before its effect.
			if err := sleepCtx(ctx, sleepAround(half)+sleepAround(half)); err != nil {
				return err
			}
			tx, ok := job.Tx().(pgx.Tx)
			if !ok {
				return twice.Permanent(fmt.Errorf("no pgx transaction, got %T", job.Tx()))
			}
			_, err := tx.Exec(ctx, `INSERT INTO chaos_ledger (effect_key, job_id) VALUES ($1, $2)`, key, job.ID)
			return err
		}
		if err := sleepCtx(ctx, sleepAround(half)); err != nil {
			if strategy == twice.ClaimBefore {
				return twice.NotApplied(err) // the effect certainly did not happen
			}
			return err
		}
		if _, err := pool.Exec(ctx, `INSERT INTO chaos_ledger (effect_key, job_id) VALUES ($1, $2)`, key, job.ID); err != nil {
			return err
		}
		// The effect happened: the rest of the handler's time is spent
		// whatever its context says, and it succeeds.
		time.Sleep(sleepAround(half))
		return nil
	}), &twice.KindOpts{Strategy: strategy, MaxAttempts: chaosMaxAttempts})
	client, err := twice.NewClient(store, twice.Config{
		Registry:       reg,
		Queues:         []twice.QueueConfig{{Name: twice.QueueDefault, Concurrency: opts.slots}},
		MaxWorkers:     opts.slots,
		LeaseDuration:  chaosLease,
		RescueInterval: chaosTwiceRescueInterval,
		Backoff:        func(int) time.Duration { return chaosRetryBackoff },
		NodeID:         opts.node,
		Logger:         chaosLogger(),
	})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return client.Shutdown(sctx, 10*time.Second)
}

// chaosLogger is a worker's logger: warnings and errors, to stderr when
// TWICE_CHAOS_LOG is set, else nowhere (a killed worker's jobs make both
// systems log, as they should).
func chaosLogger() *slog.Logger {
	w := io.Discard
	if os.Getenv("TWICE_CHAOS_LOG") != "" {
		w = os.Stderr
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// sleepCtx sleeps d, or less if ctx ends first, and then returns its error.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
