package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
)

// chaosRiverArgs is the chaos job on River; N names its effect key.
type chaosRiverArgs struct {
	N int64 `json:"n"`
}

// Kind names the chaos job's kind.
func (chaosRiverArgs) Kind() string { return "chaos_ledger" }

// chaosRiverJobTimeout is River's JobTimeout: under the rescue delay, as
// River requires, and far over the handler's time.
const chaosRiverJobTimeout = chaosLease - time.Second

// fixedRetry is River's retry policy here: the same fixed wait as twice's.
type fixedRetry struct{}

func (fixedRetry) NextRetry(*rivertype.JobRow) time.Time { return time.Now().Add(chaosRetryBackoff) }

// chaosRiver is the parent's view of River's chaos schema.
type chaosRiver struct {
	admin *pgxpool.Pool // the -pg database, no schema
	pool  *pgxpool.Pool // in the schema
	url   string
	mode  chaosMode
}

func newChaosRiver(ctx context.Context, pg, u string, m chaosMode) (*chaosRiver, error) {
	admin, err := pgxpool.New(ctx, pg)
	if err != nil {
		return nil, err
	}
	return &chaosRiver{admin: admin, url: u, mode: m}, nil
}

func (c *chaosRiver) close() {
	if c.pool != nil {
		c.pool.Close()
	}
	c.admin.Close()
}

func (c *chaosRiver) prepare(ctx context.Context, jobs int) error {
	schema := chaosSchema("river")
	if err := chaosExec(ctx, c.admin, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`, `CREATE SCHEMA `+schema); err != nil {
		return err
	}
	var err error
	if c.pool, err = pgxpool.New(ctx, c.url); err != nil {
		return err
	}
	driver := riverpgxv5.New(c.pool)
	if err := riverMigrate(ctx, driver); err != nil {
		return err
	}
	if err := chaosExec(ctx, c.pool, ledgerDDL("river_job")...); err != nil {
		return err
	}
	producer, err := river.NewClient(driver, &river.Config{Logger: chaosLogger()})
	if err != nil {
		return err
	}
	if err := inBatches(jobs, 1000, func(i int) river.InsertManyParams {
		return river.InsertManyParams{Args: chaosRiverArgs{N: int64(i) + 1}, InsertOpts: &river.InsertOpts{MaxAttempts: chaosMaxAttempts}}
	}, func(b []river.InsertManyParams) error {
		_, err := producer.InsertMany(ctx, b)
		return err
	}); err != nil {
		return fmt.Errorf("insert: %w", err)
	}
	return chaosExec(ctx, c.pool, `VACUUM ANALYZE river_job`)
}

func (c *chaosRiver) runningOn(ctx context.Context, node string) (int, error) {
	var n int
	err := c.pool.QueryRow(ctx, `SELECT count(*) FROM river_job
		WHERE state = 'running' AND attempted_by[array_length(attempted_by, 1)] = $1`, node).Scan(&n)
	return n, err
}

// riverUnfinished are River's states of a job that will still run.
const riverUnfinished = `('available', 'pending', 'retryable', 'running', 'scheduled')`

func (c *chaosRiver) unfinished(ctx context.Context) (int, error) {
	var n int
	err := c.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state IN `+riverUnfinished).Scan(&n)
	return n, err
}

// tally: River has no dead letter that waits for a human; a discarded or
// cancelled job, and a job whose row is gone, is lost.
func (c *chaosRiver) tally(ctx context.Context, jobs int) (*chaosTally, error) {
	t := &chaosTally{}
	if err := c.pool.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE state = 'completed'),
			count(*) FILTER (WHERE state IN `+riverUnfinished+`)
		FROM river_job`).Scan(&t.completed, &t.unfinished); err != nil {
		return nil, fmt.Errorf("tally: %w", err)
	}
	t.lost = jobs - t.completed - t.unfinished
	if err := c.pool.QueryRow(ctx, `SELECT count(*) FROM river_job j WHERE state = 'completed'
		AND NOT EXISTS (SELECT 1 FROM chaos_ledger l WHERE l.effect_key = 'effect-' || (j.args->>'n'))`).Scan(&t.missing); err != nil {
		return nil, fmt.Errorf("tally: %w", err)
	}
	return t, commonTally(ctx, c.pool, t)
}

// chaosRiverWorker does River's chaos jobs: by default the effect in its own
// statement and then River's completion; in complete-tx, the effect in the
// transaction River.JobCompleteTx completes the job in.
type chaosRiverWorker struct {
	river.WorkerDefaults[chaosRiverArgs]
	pool *pgxpool.Pool
	inTx bool
	half time.Duration
}

func (w *chaosRiverWorker) Work(ctx context.Context, job *river.Job[chaosRiverArgs]) error {
	key := effectKey(job.Args.N)
	if w.inTx {
		// As twice's Transactional: no transaction held across a sleep.
		if err := sleepCtx(ctx, sleepAround(w.half)+sleepAround(w.half)); err != nil {
			return err
		}
		return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO chaos_ledger (effect_key, job_id) VALUES ($1, $2)`, key, job.ID); err != nil {
				return err
			}
			_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
			return err
		})
	}
	if err := sleepCtx(ctx, sleepAround(w.half)); err != nil {
		return err
	}
	if _, err := w.pool.Exec(ctx, `INSERT INTO chaos_ledger (effect_key, job_id) VALUES ($1, $2)`, key, job.ID); err != nil {
		return err
	}
	time.Sleep(sleepAround(w.half))
	return nil
}

// chaosRiverWorkerRun is a River worker process of mode m, until ctx is done.
func chaosRiverWorkerRun(ctx context.Context, u string, m chaosMode, opts chaosOptions) error {
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		return err
	}
	defer pool.Close()
	workers := river.NewWorkers()
	river.AddWorker(workers, &chaosRiverWorker{pool: pool, inTx: m.inTx, half: opts.work / 2})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		ID:                   opts.node,
		Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: opts.slots}},
		Workers:              workers,
		JobTimeout:           chaosRiverJobTimeout,
		RescueStuckJobsAfter: chaosLease,
		RetryPolicy:          fixedRetry{},
		Logger:               chaosLogger(),
	})
	if err != nil {
		return err
	}
	// River stops hard when its start context ends; the signal asks for
	// the soft Stop below instead.
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return client.Stop(sctx)
}
