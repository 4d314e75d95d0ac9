package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Asynq's chaos mode: its tasks live in Redis (-asynq-redis), the ledger in
// PostgreSQL, as an Asynq user's would. Asynq's own recovery of a killed
// worker's tasks is a 30 s lease looked for every minute, neither of which
// its Config sets, so its drain is the longest.

// chaosAsynqQueue is the Asynq queue the chaos tasks go to; it is deleted
// (only it) before each run.
const chaosAsynqQueue = "twice_compare_chaos"

// chaosAsynqType is the chaos task's type.
const chaosAsynqType = "chaos:ledger"

// chaosAsynqPayload is the chaos task's payload; N names its effect key.
type chaosAsynqPayload struct {
	N int64 `json:"n"`
}

// asynqReachable says why Asynq cannot run here, or "".
func asynqReachable(addr string) string {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return fmt.Sprintf("no Redis at %s (%v): start one or point -asynq-redis at one", addr, err)
	}
	_ = conn.Close()
	return ""
}

// chaosAsynq is the parent's view of Asynq's queue and the ledger.
type chaosAsynq struct {
	admin     *pgxpool.Pool // the -pg database, no schema
	pool      *pgxpool.Pool // in the ledger's schema
	url       string
	redis     asynq.RedisClientOpt
	inspector *asynq.Inspector
}

func newChaosAsynq(ctx context.Context, pg, u, redisAddr string) (*chaosAsynq, error) {
	admin, err := pgxpool.New(ctx, pg)
	if err != nil {
		return nil, err
	}
	r := asynq.RedisClientOpt{Addr: redisAddr}
	return &chaosAsynq{admin: admin, url: u, redis: r, inspector: asynq.NewInspector(r)}, nil
}

func (c *chaosAsynq) close() {
	_ = c.inspector.Close()
	if c.pool != nil {
		c.pool.Close()
	}
	c.admin.Close()
}

func (c *chaosAsynq) prepare(ctx context.Context, jobs int) error {
	schema := chaosSchema("asynq")
	if err := chaosExec(ctx, c.admin, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`, `CREATE SCHEMA `+schema); err != nil {
		return err
	}
	var err error
	if c.pool, err = pgxpool.New(ctx, c.url); err != nil {
		return err
	}
	ddl := append(ledgerDDL(""), `CREATE TABLE chaos_running (node text NOT NULL, task_id bigint NOT NULL)`)
	if err := chaosExec(ctx, c.pool, ddl...); err != nil {
		return err
	}
	// A forced delete leaves the completed tasks, whose ids would clash.
	// On a Redis that never held the queue there is nothing to delete, and
	// the inspector's answer for the completed tasks of a queue it does not
	// know is not ErrQueueNotFound, so look first.
	queues, err := c.inspector.Queues()
	if err != nil {
		return fmt.Errorf("list asynq queues: %w", err)
	}
	if slices.Contains(queues, chaosAsynqQueue) {
		if _, err := c.inspector.DeleteAllCompletedTasks(chaosAsynqQueue); err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
			return fmt.Errorf("delete asynq queue %s's completed tasks: %w", chaosAsynqQueue, err)
		}
		if err := c.inspector.DeleteQueue(chaosAsynqQueue, true); err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
			return fmt.Errorf("delete asynq queue %s: %w", chaosAsynqQueue, err)
		}
	}
	client := asynq.NewClient(c.redis)
	defer func() { _ = client.Close() }()
	for n := int64(1); n <= int64(jobs); n++ {
		payload, err := json.Marshal(chaosAsynqPayload{N: n})
		if err != nil {
			return err
		}
		// Completed tasks are kept (Retention), so they can be counted;
		// MaxRetry is attempts less the first.
		task := asynq.NewTask(chaosAsynqType, payload, asynq.Queue(chaosAsynqQueue), asynq.TaskID(strconv.FormatInt(n, 10)),
			asynq.MaxRetry(chaosMaxAttempts-1), asynq.Retention(time.Hour))
		if _, err := client.EnqueueContext(ctx, task); err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
	}
	return nil
}

// runningOn counts the tasks the node's handlers had started and not
// returned from, as they recorded them in chaos_running: Asynq's own record
// of a server's active tasks is a heartbeat every 5 s, too coarse for a kill
// every 2 s. A kill between a handler's return and Asynq's completion is
// missed by this count.
func (c *chaosAsynq) runningOn(ctx context.Context, node string) (int, error) {
	var n int
	err := c.pool.QueryRow(ctx, `SELECT count(*) FROM chaos_running WHERE node = $1`, node).Scan(&n)
	return n, err
}

func (c *chaosAsynq) queueInfo() (*asynq.QueueInfo, error) {
	info, err := c.inspector.GetQueueInfo(chaosAsynqQueue)
	if err != nil {
		return nil, fmt.Errorf("asynq queue info: %w", err)
	}
	return info, nil
}

func (c *chaosAsynq) unfinished(context.Context) (int, error) {
	info, err := c.queueInfo()
	if err != nil {
		return 0, err
	}
	return info.Pending + info.Active + info.Scheduled + info.Retry + info.Aggregating, nil
}

// tally: an archived task (Asynq's dead letter after its retries) and a
// task gone from Redis are lost. Asynq keeps no history of a task's moves,
// so completed twice is not observable.
func (c *chaosAsynq) tally(ctx context.Context, jobs int) (*chaosTally, error) {
	info, err := c.queueInfo()
	if err != nil {
		return nil, err
	}
	t := &chaosTally{completed: info.Completed, completedTwiceNA: true}
	t.unfinished = info.Pending + info.Active + info.Scheduled + info.Retry + info.Aggregating
	t.lost = jobs - t.completed - t.unfinished
	var keys []string
	for page := 1; ; page++ {
		tasks, err := c.inspector.ListCompletedTasks(chaosAsynqQueue, asynq.PageSize(1000), asynq.Page(page))
		if err != nil {
			return nil, fmt.Errorf("list completed tasks: %w", err)
		}
		for _, task := range tasks {
			keys = append(keys, "effect-"+task.ID)
		}
		if len(tasks) < 1000 {
			break
		}
	}
	if err := c.pool.QueryRow(ctx, `SELECT count(*) FROM unnest($1::text[]) k
		WHERE NOT EXISTS (SELECT 1 FROM chaos_ledger l WHERE l.effect_key = k)`, keys).Scan(&t.missing); err != nil {
		return nil, fmt.Errorf("tally: %w", err)
	}
	return t, commonTally(ctx, c.pool, t)
}

// chaosAsynqWorkerRun is an Asynq worker process, until ctx is done: the
// effect in its own statement, then Asynq's completion.
func chaosAsynqWorkerRun(ctx context.Context, u, redisAddr string, opts chaosOptions) error {
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		return err
	}
	defer pool.Close()
	half := opts.work / 2
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: redisAddr}, asynq.Config{
		Concurrency:     opts.slots,
		Queues:          map[string]int{chaosAsynqQueue: 1},
		RetryDelayFunc:  func(int, error, *asynq.Task) time.Duration { return chaosRetryBackoff },
		LogLevel:        asynq.FatalLevel,
		ShutdownTimeout: 10 * time.Second,
	})
	handler := asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		var p chaosAsynqPayload
		if err := json.Unmarshal(task.Payload(), &p); err != nil {
			return fmt.Errorf("%w: %w", err, asynq.SkipRetry)
		}
		// The task is running on this node until the handler returns.
		if _, err := pool.Exec(ctx, `INSERT INTO chaos_running (node, task_id) VALUES ($1, $2)`, opts.node, p.N); err != nil {
			return err
		}
		defer func() {
			_, _ = pool.Exec(context.WithoutCancel(ctx), `DELETE FROM chaos_running WHERE node = $1 AND task_id = $2`, opts.node, p.N)
		}()
		if err := sleepCtx(ctx, sleepAround(half)); err != nil {
			return err
		}
		id, _ := asynq.GetTaskID(ctx)
		if _, err := pool.Exec(ctx, `INSERT INTO chaos_ledger (effect_key, job_id) VALUES ($1, $2)`, effectKey(p.N), p.N); err != nil {
			return fmt.Errorf("ledger row of task %s: %w", id, err)
		}
		time.Sleep(sleepAround(half))
		return nil
	})
	if err := srv.Start(handler); err != nil {
		return err
	}
	<-ctx.Done()
	srv.Shutdown()
	return nil
}
