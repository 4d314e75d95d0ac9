package twicesqlite

// Composition: continuations (inserted by JobFinish), workflows and
// batches. The workflow and batch edges themselves are fired by the
// triggers of migration 012, in the transaction of the state change that
// causes them; this file stores the graphs and batches and reads them.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// insertChildren inserts a finished outcome's continuations, in JobFinish's
// transaction: when the outcome completed and either its guarded write
// applied or, for an outcome with a marker, this call stored the marker
// (see twicestore.Composer for why).
func insertChildren(ctx context.Context, q dbtx, o *twicestore.JobOutcome, applied, claimedHere bool) error {
	if !driverkit.ChildrenEarned(o, applied, claimedHere) {
		return nil
	}
	for _, c := range o.Children {
		c.ParentID = o.ID
	}
	for start := 0; start < len(o.Children); start += insertChunk {
		end := min(start+insertChunk, len(o.Children))
		if err := insertChunkOf(ctx, q, o.Children[start:end], make([]*twicestore.JobInsertResult, end-start)); err != nil {
			return fmt.Errorf("insert continuations: %w", err)
		}
	}
	return nil
}

// lastJobID is the highest job id ever handed out: a write that raised it
// inserted jobs (a continuation, a released workflow task, a batch
// callback, maybe by a trigger), which JobFinish reports as Inserted.
func lastJobID(ctx context.Context, q dbtx) (int64, error) {
	var id sql.NullInt64
	err := q.QueryRowContext(ctx, `SELECT seq FROM sqlite_sequence WHERE name = 'twice_jobs'`).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return id.Int64, err
}

// releaseRootsSQL enqueues a new workflow's tasks that wait for nothing,
// as the completion trigger enqueues the others: due when the workflow is
// stored or at the task's own run_at, whichever is later.
const releaseRootsSQL = `INSERT INTO twice_jobs (kind, queue, priority, args, message_id, idempotency_key, correlation_id,
	max_attempts, run_at, created_at, metadata, concurrency_key, workflow_id, workflow_task)
SELECT kind, queue, priority, args, message_id, idempotency_key, correlation_id,
	max_attempts, max(?2, coalesce(run_at, 0)), ?2, metadata, concurrency_key, workflow_id, name
FROM twice_workflow_tasks WHERE workflow_id = ?1 AND state = 'waiting' AND pending = 0
ORDER BY name
RETURNING ` + jobColumns

// WorkflowInsert stores the workflow, its tasks and edges, and enqueues its
// roots, in one transaction.
func (e *executor) WorkflowInsert(ctx context.Context, p *twicestore.WorkflowInsertParams) (*twicestore.WorkflowInsertResult, error) {
	now := nowOr(p.CreatedAt)
	onDead := p.OnDeadPolicy()
	res := &twicestore.WorkflowInsertResult{}
	err := e.inTx(ctx, func(q dbtx) error {
		w, err := scanWorkflow(q.QueryRowContext(ctx, `INSERT INTO twice_workflows (name, on_dead, tasks, created_at)
			VALUES (?, ?, ?, ?) RETURNING `+driverkit.WorkflowColumns, p.Name, onDead, len(p.Tasks), micros(now)))
		if err != nil {
			return err
		}
		res.Workflow = w
		task, err := q.PrepareContext(ctx, `INSERT INTO twice_workflow_tasks (workflow_id, name, pending, kind, queue, priority,
			args, message_id, idempotency_key, correlation_id, max_attempts, metadata, concurrency_key, run_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
		if err != nil {
			return err
		}
		defer task.Close()
		dep, err := q.PrepareContext(ctx, `INSERT INTO twice_workflow_deps (workflow_id, dep, task) VALUES (?, ?, ?)`)
		if err != nil {
			return err
		}
		defer dep.Close()
		for _, t := range p.Tasks {
			j := t.Job
			payload := j.Args
			if payload == nil {
				payload = []byte{}
			}
			if _, err := task.ExecContext(ctx, w.ID, t.Name, len(t.Deps), j.Kind, j.Queue, j.Priority, payload,
				j.MessageID, j.Key, j.CorrelationID, j.MaxAttempts, metadataJSON(j.Metadata), j.ConcurrencyKey,
				nullMicros(j.RunAt)); err != nil {
				return fmt.Errorf("task %q: %w", t.Name, err)
			}
			for _, d := range t.Deps {
				if _, err := dep.ExecContext(ctx, w.ID, d, t.Name); err != nil {
					return fmt.Errorf("task %q: dependency %q: %w", t.Name, d, err)
				}
			}
		}
		if res.Jobs, err = queryJobs(ctx, q, releaseRootsSQL, w.ID, micros(now)); err != nil {
			return err
		}
		_, err = q.ExecContext(ctx, `UPDATE twice_workflow_tasks SET state = 'enqueued'
			WHERE workflow_id = ? AND state = 'waiting' AND pending = 0`, w.ID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("insert workflow %q: %w", p.Name, err)
	}
	sort.Slice(res.Jobs, func(a, b int) bool { return res.Jobs[a].ID < res.Jobs[b].ID })
	return res, nil
}

// WorkflowGet returns the workflow and its tasks, with each enqueued
// task's job.
func (e *executor) WorkflowGet(ctx context.Context, p *twicestore.WorkflowGetParams) (*twicestore.WorkflowGetResult, error) {
	w, err := scanWorkflow(e.db.QueryRowContext(ctx, `SELECT `+driverkit.WorkflowColumns+` FROM twice_workflows WHERE id = ?`, p.ID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("get workflow %d: %w", p.ID, twicestore.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get workflow %d: %w", p.ID, err)
	}
	res := &twicestore.WorkflowGetResult{Workflow: w}
	rs, err := e.db.QueryContext(ctx, `SELECT name, kind, pending, state FROM twice_workflow_tasks
		WHERE workflow_id = ? ORDER BY name`, p.ID)
	if err == nil {
		err = driverkit.ReadTasks(res, rs)
	}
	if err == nil {
		rs, err = e.db.QueryContext(ctx, `SELECT dep, task FROM twice_workflow_deps WHERE workflow_id = ? ORDER BY task, dep`, p.ID)
	}
	if err == nil {
		err = driverkit.ReadDeps(res, rs)
	}
	if err != nil {
		return nil, fmt.Errorf("get workflow %d: %w", p.ID, err)
	}
	jobs, err := e.workflowJobs(ctx, e.db, p.ID)
	if err != nil {
		return nil, fmt.Errorf("get workflow %d: %w", p.ID, err)
	}
	for name, j := range jobs {
		res.SetJob(name, j)
	}
	return res, nil
}

// workflowJobs returns the jobs of a workflow by task name.
func (e *executor) workflowJobs(ctx context.Context, q dbtx, id int64) (map[string]*twicetype.JobRow, error) {
	rs, err := q.QueryContext(ctx, `SELECT workflow_task, `+jobColumns+` FROM twice_jobs
		WHERE workflow_id = ?`, id)
	if err != nil {
		return nil, err
	}
	out := map[string]*twicetype.JobRow{}
	for row, err := range dbrows.Iter(rs) {
		if err != nil {
			return nil, err
		}
		var name string
		j, err := scanJob(prefixScanner{row, &name})
		if err != nil {
			return nil, err
		}
		out[name] = j
	}
	return out, nil
}

// prefixScanner scans leading columns into dest before the rest.
type prefixScanner struct {
	r    rowScanner
	dest *string
}

func (p prefixScanner) Scan(dest ...any) error {
	return p.r.Scan(append([]any{p.dest}, dest...)...)
}

// WorkflowCancel cancels the workflow's waiting tasks and unfinished jobs
// in one transaction.
func (e *executor) WorkflowCancel(ctx context.Context, p *twicestore.WorkflowCancelParams) (*twicestore.WorkflowCancelResult, error) {
	now := nowOr(p.Now)
	res := &twicestore.WorkflowCancelResult{}
	err := e.inTx(ctx, func(q dbtx) error {
		w, err := scanWorkflow(q.QueryRowContext(ctx, `UPDATE twice_workflows SET
			state = CASE WHEN state = 'running' THEN 'cancelled' ELSE state END,
			finished_at = CASE WHEN state = 'running' THEN ? ELSE finished_at END
			WHERE id = ? RETURNING `+driverkit.WorkflowColumns, micros(now), p.ID))
		if errors.Is(err, sql.ErrNoRows) {
			return twicestore.ErrNotFound
		}
		if err != nil {
			return err
		}
		res.Workflow = w
		r, err := q.ExecContext(ctx, `UPDATE twice_workflow_tasks SET state = 'cancelled'
			WHERE workflow_id = ? AND state = 'waiting'`, p.ID)
		if err != nil {
			return err
		}
		n, _ := r.RowsAffected()
		res.Tasks = int(n)
		rs, err := q.QueryContext(ctx, `SELECT id FROM twice_jobs WHERE workflow_id = ? AND state IN ('available', 'running', 'waiting')`, p.ID)
		if err != nil {
			return err
		}
		// A read that ended early must not pass for all of the jobs: the
		// rest would stay uncancelled in a workflow marked cancelled.
		ids, err := dbrows.Collect(rs, dbrows.One[int64])
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			res.Jobs = &twicestore.JobBulkResult{}
			return nil
		}
		res.Jobs, err = (&executor{db: q}).JobCancel(ctx, &twicestore.JobCancelParams{
			Filter: twicestore.JobFilter{IDs: ids}, By: p.By, Reason: p.Reason, Now: now})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cancel workflow %d: %w", p.ID, err)
	}
	return res, nil
}

// WorkflowList lists workflows newest first.
func (e *executor) WorkflowList(ctx context.Context, p *twicestore.WorkflowListParams) (*twicestore.WorkflowListResult, error) {
	before, limit := p.Page()
	rs, err := e.db.QueryContext(ctx, `SELECT `+driverkit.WorkflowColumns+` FROM twice_workflows
		WHERE id < ? AND (? = '' OR state = ?) ORDER BY id DESC LIMIT ?`, before, string(p.State), string(p.State), limit)
	if err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	ws, err := dbrows.Collect(rs, scanWorkflow)
	if err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	return &twicestore.WorkflowListResult{Workflows: ws}, nil
}

// BatchInsert stores the batch (open while its first jobs go in), its
// jobs, and seals it unless asked to keep it open.
func (e *executor) BatchInsert(ctx context.Context, p *twicestore.BatchInsertParams) (*twicestore.BatchInsertResult, error) {
	now := nowOr(p.CreatedAt)
	c := p.Callback
	payload := c.Args
	if payload == nil {
		payload = []byte{}
	}
	res := &twicestore.BatchInsertResult{}
	err := e.inTx(ctx, func(q dbtx) error {
		var id int64
		if err := q.QueryRowContext(ctx, `INSERT INTO twice_batches (on_success, sealed, kind, queue, priority, args,
			message_id, idempotency_key, correlation_id, max_attempts, metadata, concurrency_key, created_at)
			VALUES (?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
			p.OnSuccess, c.Kind, c.Queue, c.Priority, payload, c.MessageID, c.Key, c.CorrelationID, c.MaxAttempts,
			metadataJSON(c.Metadata), c.ConcurrencyKey, micros(now)).Scan(&id); err != nil {
			return err
		}
		jobs, err := batchAdd(ctx, q, id, p.Jobs)
		if err != nil {
			return err
		}
		res.Jobs = jobs
		if !p.Open {
			if err := batchSeal(ctx, q, id, now); err != nil {
				return err
			}
		}
		res.Batch, err = scanBatch(q.QueryRowContext(ctx, `SELECT `+driverkit.BatchColumns+` FROM twice_batches WHERE id = ?`, id))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("insert batch: %w", err)
	}
	return res, nil
}

// batchAdd inserts jobs into batch id and counts those inserted.
func batchAdd(ctx context.Context, q dbtx, id int64, jobs []*twicestore.JobInsertParams) ([]*twicestore.JobInsertResult, error) {
	out := make([]*twicestore.JobInsertResult, len(jobs))
	for _, j := range jobs {
		j.BatchID = id
	}
	for start := 0; start < len(jobs); start += insertChunk {
		end := min(start+insertChunk, len(jobs))
		if err := insertChunkOf(ctx, q, jobs[start:end], out[start:end]); err != nil {
			return nil, err
		}
	}
	_, err := q.ExecContext(ctx, `UPDATE twice_batches SET total = total + ?1, pending = pending + ?1 WHERE id = ?2`,
		driverkit.Joined(out), id)
	return out, err
}

// batchSeal seals batch id and, when nothing is pending, inserts its
// callback (as the batch trigger would have, had a job finished last).
func batchSeal(ctx context.Context, q dbtx, id int64, now time.Time) error {
	if _, err := q.ExecContext(ctx, `UPDATE twice_batches SET sealed = 1,
		callback_state = CASE WHEN callback_state = 0 AND pending = 0 AND (on_success = 0 OR (dead = 0 AND cancelled = 0))
			THEN 1 ELSE callback_state END,
		finished_at = CASE WHEN callback_state = 0 AND pending = 0 THEN coalesce(finished_at, ?2) ELSE finished_at END
		WHERE id = ?1`, id, micros(now)); err != nil {
		return err
	}
	var cb int64
	err := q.QueryRowContext(ctx, `INSERT INTO twice_jobs (kind, queue, priority, args, message_id, idempotency_key,
		correlation_id, max_attempts, run_at, created_at, metadata, concurrency_key)
		SELECT kind, queue, priority, args, message_id, idempotency_key, correlation_id, max_attempts,
			finished_at, finished_at, metadata, concurrency_key
		FROM twice_batches WHERE id = ? AND callback_state = 1 RETURNING id`, id).Scan(&cb)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = q.ExecContext(ctx, `UPDATE twice_batches SET callback_state = 2, callback_job_id = ? WHERE id = ?`, cb, id)
	return err
}

// BatchAdd adds jobs to an open batch.
func (e *executor) BatchAdd(ctx context.Context, p *twicestore.BatchAddParams) (*twicestore.BatchAddResult, error) {
	res := &twicestore.BatchAddResult{}
	err := e.inTx(ctx, func(q dbtx) error {
		var sealed bool
		err := q.QueryRowContext(ctx, `SELECT sealed FROM twice_batches WHERE id = ?`, p.ID).Scan(&sealed)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return twicestore.ErrNotFound
		case err != nil:
			return err
		case sealed:
			return twicestore.ErrBatchSealed
		}
		if res.Jobs, err = batchAdd(ctx, q, p.ID, p.Jobs); err != nil {
			return err
		}
		res.Batch, err = scanBatch(q.QueryRowContext(ctx, `SELECT `+driverkit.BatchColumns+` FROM twice_batches WHERE id = ?`, p.ID))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("add to batch %d: %w", p.ID, err)
	}
	return res, nil
}

// BatchSeal seals a batch.
func (e *executor) BatchSeal(ctx context.Context, p *twicestore.BatchSealParams) (*twicetype.Batch, error) {
	var b *twicetype.Batch
	err := e.inTx(ctx, func(q dbtx) error {
		if err := batchSeal(ctx, q, p.ID, nowOr(p.Now)); err != nil {
			return err
		}
		var err error
		b, err = scanBatch(q.QueryRowContext(ctx, `SELECT `+driverkit.BatchColumns+` FROM twice_batches WHERE id = ?`, p.ID))
		if errors.Is(err, sql.ErrNoRows) {
			return twicestore.ErrNotFound
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("seal batch %d: %w", p.ID, err)
	}
	return b, nil
}

// BatchGet returns a batch.
func (e *executor) BatchGet(ctx context.Context, p *twicestore.BatchGetParams) (*twicetype.Batch, error) {
	b, err := scanBatch(e.db.QueryRowContext(ctx, `SELECT `+driverkit.BatchColumns+` FROM twice_batches WHERE id = ?`, p.ID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("get batch %d: %w", p.ID, twicestore.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get batch %d: %w", p.ID, err)
	}
	return b, nil
}

// BatchList lists one page of batches, newest first.
func (e *executor) BatchList(ctx context.Context, p *twicestore.BatchListParams) (*twicestore.BatchListResult, error) {
	before, limit := p.Page()
	rs, err := e.db.QueryContext(ctx, `SELECT `+driverkit.BatchColumns+` FROM twice_batches
		WHERE id < ? AND (NOT ? OR finished_at IS NULL) ORDER BY id DESC LIMIT ?`, before, p.Unfinished, limit)
	if err != nil {
		return nil, fmt.Errorf("list batches: %w", err)
	}
	bs, err := dbrows.Collect(rs, scanBatch)
	if err != nil {
		return nil, fmt.Errorf("list batches: %w", err)
	}
	return &twicestore.BatchListResult{Batches: bs}, nil
}

// JobChildren lists the jobs a job's completion inserted.
func (e *executor) JobChildren(ctx context.Context, p *twicestore.JobChildrenParams) ([]*twicetype.JobRow, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = -1
	}
	jobs, err := queryJobs(ctx, e.db, `SELECT `+jobColumns+` FROM twice_jobs WHERE parent_id = ? ORDER BY id LIMIT ?`, p.ParentID, limit)
	if err != nil {
		return nil, fmt.Errorf("list children of job %d: %w", p.ParentID, err)
	}
	return jobs, nil
}

// WorkflowTaskOf finds a job's task and its dependencies' jobs.
func (e *executor) WorkflowTaskOf(ctx context.Context, p *twicestore.WorkflowTaskOfParams) (*twicestore.WorkflowTaskOfResult, error) {
	res := &twicestore.WorkflowTaskOfResult{Deps: map[string]int64{}}
	var wf sql.NullInt64
	err := e.db.QueryRowContext(ctx, `SELECT workflow_id, workflow_task FROM twice_jobs WHERE id = ?`, p.JobID).Scan(&wf, &res.Task)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && !wf.Valid) {
		return nil, fmt.Errorf("workflow task of job %d: %w", p.JobID, twicestore.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("workflow task of job %d: %w", p.JobID, err)
	}
	res.WorkflowID = wf.Int64
	rs, err := e.db.QueryContext(ctx, `SELECT d.dep, j.id FROM twice_workflow_deps AS d
		JOIN twice_jobs AS j ON j.workflow_id = d.workflow_id AND j.workflow_task = d.dep
		WHERE d.workflow_id = ? AND d.task = ?`, res.WorkflowID, res.Task)
	if err != nil {
		return nil, fmt.Errorf("workflow task of job %d: %w", p.JobID, err)
	}
	if res.Deps, err = dbrows.Pairs[string, int64](rs); err != nil {
		return nil, fmt.Errorf("workflow task of job %d: %w", p.JobID, err)
	}
	return res, nil
}

// scanWorkflow and scanBatch read one row of driverkit.WorkflowColumns and
// driverkit.BatchColumns, their times as unix microseconds.
var (
	scanWorkflow = driverkit.WorkflowRow(driverkit.MicrosTimes)
	scanBatch    = driverkit.BatchRow(driverkit.MicrosTimes)
)
