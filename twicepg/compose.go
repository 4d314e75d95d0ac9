package twicepg

// Composition: continuations (inserted by JobFinish), workflows and
// batches. The workflow and batch edges themselves are fired by the
// triggers of migration 012, in the transaction of the state change that
// causes them; this file stores the graphs and batches and reads them.

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// finishWithChildren is JobFinish for outcomes that carry continuations:
// the markers of those outcomes are claimed first, one by one, so the
// call knows which claims are its own; then the outcomes are written as
// usual (their markers' claims are no-ops by then); then the children of
// the outcomes that earned them are inserted, all in one transaction.
func (e *executor) finishWithChildren(ctx context.Context, p *twicestore.JobFinishParams) (*twicestore.JobFinishResult, error) {
	var res *twicestore.JobFinishResult
	err := e.inTx(ctx, func(tx *executor) error {
		claimed := make([]bool, len(p.Outcomes))
		plain := make([]*twicestore.JobOutcome, len(p.Outcomes))
		for i, o := range p.Outcomes {
			c := *o
			c.Children = nil
			plain[i] = &c
			m := o.Marker
			if m == nil || len(o.Children) == 0 || o.State != twicetype.JobStateCompleted {
				continue
			}
			at := m.Now
			if at.IsZero() {
				at = nowOr(o.FinishedAt)
			}
			jobID, epoch := m.JobID, m.Epoch
			if jobID == 0 {
				jobID, epoch = o.ID, o.Epoch
			}
			n, err := tx.q.exec(ctx, `INSERT INTO twice_markers (handler, key, processed_at, job_id, epoch)
				VALUES ($1, $2, $3, $4, $5) ON CONFLICT (handler, key) DO NOTHING`, m.Handler, m.Key, at, jobID, epoch)
			if err != nil {
				return fmt.Errorf("job %d: claim marker: %w", o.ID, err)
			}
			claimed[i] = n == 1
		}
		r, err := tx.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: plain})
		if err != nil {
			return err
		}
		var kids []*twicestore.JobInsertParams
		for i, o := range p.Outcomes {
			if !driverkit.ChildrenEarned(o, r.Applied[i], claimed[i]) {
				continue
			}
			for _, c := range o.Children {
				c.ParentID = o.ID
				kids = append(kids, c)
			}
		}
		if len(kids) > 0 {
			if _, err := tx.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: kids}); err != nil {
				return fmt.Errorf("insert continuations: %w", err)
			}
			r.Inserted = true
		}
		res = r
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("finish jobs: %w", err)
	}
	return res, nil
}

// WorkflowInsert stores the workflow, its tasks and edges, and enqueues its
// roots, in one transaction.
func (e *executor) WorkflowInsert(ctx context.Context, p *twicestore.WorkflowInsertParams) (*twicestore.WorkflowInsertResult, error) {
	e.floors.dropAll() // the roots may be due before the jobs fetched so far
	now := nowOr(p.CreatedAt)
	onDead := p.OnDeadPolicy()
	n := len(p.Tasks)
	var (
		names, kinds, queues, msgIDs, keys, corrIDs, metas, ckeys = make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		pending, prios, maxAtt = make([]int32, n), make([]int32, n), make([]int32, n)
		payloads               = make([][]byte, n)
		runAts                 = make([]*time.Time, n) // nil: no time of its own
		depFrom, depTo         = []string{}, []string{}
	)
	for i, t := range p.Tasks {
		j := t.Job
		names[i], kinds[i], queues[i], msgIDs[i], keys[i], corrIDs[i] = t.Name, j.Kind, j.Queue, j.MessageID, j.Key, j.CorrelationID
		metas[i], ckeys[i] = metadataJSON(j.Metadata), j.ConcurrencyKey
		pending[i], prios[i], maxAtt[i] = int32(len(t.Deps)), int32(j.Priority), int32(j.MaxAttempts)
		payloads[i] = j.Args
		if payloads[i] == nil {
			payloads[i] = []byte{}
		}
		if !j.RunAt.IsZero() {
			runAts[i] = &j.RunAt
		}
		for _, d := range t.Deps {
			depFrom, depTo = append(depFrom, d), append(depTo, t.Name)
		}
	}
	res := &twicestore.WorkflowInsertResult{}
	err := e.inTx(ctx, func(tx *executor) error {
		w, err := scanWorkflow(tx.q.queryRow(ctx, `INSERT INTO twice_workflows (name, on_dead, tasks, created_at)
			VALUES ($1, $2, $3, $4) RETURNING `+driverkit.WorkflowColumns, p.Name, onDead, n, now))
		if err != nil {
			return err
		}
		res.Workflow = w
		if _, err := tx.q.exec(ctx, `INSERT INTO twice_workflow_tasks (workflow_id, name, pending, kind, queue, priority,
			args, message_id, idempotency_key, correlation_id, max_attempts, metadata, concurrency_key, run_at)
			SELECT $1, t.name, t.pending, t.kind, t.queue, t.priority, t.args, t.message_id, t.idempotency_key,
				t.correlation_id, t.max_attempts, t.metadata::jsonb, t.concurrency_key, t.run_at
			FROM unnest($2::text[], $3::integer[], $4::text[], $5::text[], $6::integer[], $7::bytea[], $8::text[],
				$9::text[], $10::text[], $11::integer[], $12::text[], $13::text[], $14::timestamptz[])
				AS t(name, pending, kind, queue, priority, args, message_id, idempotency_key, correlation_id,
					max_attempts, metadata, concurrency_key, run_at)`,
			w.ID, names, pending, kinds, queues, prios, payloads, msgIDs, keys, corrIDs, maxAtt, metas, ckeys, runAts); err != nil {
			return fmt.Errorf("insert tasks: %w", err)
		}
		if _, err := tx.q.exec(ctx, `INSERT INTO twice_workflow_deps (workflow_id, dep, task)
			SELECT $1, d.dep, d.task FROM unnest($2::text[], $3::text[]) AS d(dep, task)`, w.ID, depFrom, depTo); err != nil {
			return fmt.Errorf("insert dependencies: %w", err)
		}
		if res.Jobs, err = queryJobs(ctx, tx.q, `WITH roots AS (
				UPDATE twice_workflow_tasks SET state = 'enqueued'
				WHERE workflow_id = $1 AND state = 'waiting' AND pending = 0
				RETURNING *
			)
			INSERT INTO twice_jobs AS j (kind, queue, priority, args, message_id, idempotency_key, correlation_id,
				max_attempts, run_at, created_at, metadata, concurrency_key, workflow_id, workflow_task)
			SELECT kind, queue, priority, args, message_id, idempotency_key, correlation_id,
				max_attempts, greatest($2, run_at), $2, metadata, concurrency_key, workflow_id, name
			FROM roots ORDER BY name
			RETURNING `+jobColumns, w.ID, now); err != nil {
			return fmt.Errorf("enqueue roots: %w", err)
		}
		_, err = tx.q.exec(ctx, `SELECT pg_notify($1, q) FROM (SELECT DISTINCT unnest($2::text[]) AS q) AS qs`,
			e.notify.channel, queues)
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
	w, err := scanWorkflow(e.q.queryRow(ctx, `SELECT `+driverkit.WorkflowColumns+` FROM twice_workflows WHERE id = $1`, p.ID))
	if isNoRows(err) {
		return nil, fmt.Errorf("get workflow %d: %w", p.ID, twicestore.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get workflow %d: %w", p.ID, err)
	}
	res := &twicestore.WorkflowGetResult{Workflow: w}
	rs, err := e.q.query(ctx, `SELECT name, kind, pending, state FROM twice_workflow_tasks
		WHERE workflow_id = $1 ORDER BY name`, p.ID)
	if err == nil {
		err = driverkit.ReadTasks(res, rs)
	}
	if err == nil {
		rs, err = e.q.query(ctx, `SELECT dep, task FROM twice_workflow_deps WHERE workflow_id = $1 ORDER BY task, dep`, p.ID)
	}
	if err == nil {
		err = driverkit.ReadDeps(res, rs)
	}
	if err != nil {
		return nil, fmt.Errorf("get workflow %d: %w", p.ID, err)
	}
	rs, err = e.q.query(ctx, `SELECT j.workflow_task, `+jobColumns+` FROM twice_jobs AS j WHERE j.workflow_id = $1`, p.ID)
	if err != nil {
		return nil, fmt.Errorf("get workflow %d: %w", p.ID, err)
	}
	for row, err := range dbrows.Iter(rs) {
		if err != nil {
			return nil, fmt.Errorf("get workflow %d: %w", p.ID, err)
		}
		var name string
		j, err := scanJob(row, &name)
		if err != nil {
			return nil, fmt.Errorf("get workflow %d: %w", p.ID, err)
		}
		res.SetJob(name, j)
	}
	return res, nil
}

// WorkflowList lists workflows newest first.
func (e *executor) WorkflowList(ctx context.Context, p *twicestore.WorkflowListParams) (*twicestore.WorkflowListResult, error) {
	before, limit := p.Page()
	rs, err := e.q.query(ctx, `SELECT `+driverkit.WorkflowColumns+` FROM twice_workflows
		WHERE id < $1 AND ($2 = '' OR state = $2) ORDER BY id DESC LIMIT $3`, before, string(p.State), limit)
	if err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	ws, err := dbrows.Collect(rs, scanWorkflow)
	if err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	return &twicestore.WorkflowListResult{Workflows: ws}, nil
}

// WorkflowCancel cancels the workflow's waiting tasks and unfinished jobs
// in one transaction.
func (e *executor) WorkflowCancel(ctx context.Context, p *twicestore.WorkflowCancelParams) (*twicestore.WorkflowCancelResult, error) {
	now := nowOr(p.Now)
	res := &twicestore.WorkflowCancelResult{}
	err := e.inTx(ctx, func(tx *executor) error {
		// The workflow's unfinished jobs first, in id order, then the
		// workflow: a completion locks its jobs' rows in id order and the
		// workflow's at the end of its statement, so taking the workflow
		// first and then waiting for a job a completion holds deadlocked.
		if _, err := tx.q.exec(ctx, `SELECT id FROM twice_jobs
			WHERE workflow_id = $1 AND state IN ('available', 'running', 'waiting')
			ORDER BY id FOR UPDATE`, p.ID); err != nil {
			return err
		}
		w, err := scanWorkflow(tx.q.queryRow(ctx, `UPDATE twice_workflows SET
			state = CASE WHEN state = 'running' THEN 'cancelled' ELSE state END,
			finished_at = CASE WHEN state = 'running' THEN $1 ELSE finished_at END
			WHERE id = $2 RETURNING `+driverkit.WorkflowColumns, now, p.ID))
		if isNoRows(err) {
			return twicestore.ErrNotFound
		}
		if err != nil {
			return err
		}
		res.Workflow = w
		n, err := tx.q.exec(ctx, `UPDATE twice_workflow_tasks SET state = 'cancelled'
			WHERE workflow_id = $1 AND state = 'waiting'`, p.ID)
		if err != nil {
			return err
		}
		res.Tasks = int(n)
		ids, err := queryIDs(ctx, tx.q, `SELECT id FROM twice_jobs WHERE workflow_id = $1 AND state IN ('available', 'running', 'waiting')`, p.ID)
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			res.Jobs = &twicestore.JobBulkResult{}
			return nil
		}
		res.Jobs, err = tx.JobCancel(ctx, &twicestore.JobCancelParams{
			Filter: twicestore.JobFilter{IDs: ids}, By: p.By, Reason: p.Reason, Now: now})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cancel workflow %d: %w", p.ID, err)
	}
	return res, nil
}

func (e *executor) batchGet(ctx context.Context, id int64) (*twicetype.Batch, error) {
	b, err := scanBatch(e.q.queryRow(ctx, `SELECT `+driverkit.BatchColumns+` FROM twice_batches WHERE id = $1`, id))
	if isNoRows(err) {
		return nil, twicestore.ErrNotFound
	}
	return b, err
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
	err := e.inTx(ctx, func(tx *executor) error {
		var id int64
		if err := tx.q.queryRow(ctx, `INSERT INTO twice_batches (on_success, sealed, kind, queue, priority, args,
			message_id, idempotency_key, correlation_id, max_attempts, metadata, concurrency_key, created_at)
			VALUES ($1, false, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb, $11, $12) RETURNING id`,
			p.OnSuccess, c.Kind, c.Queue, int32(c.Priority), payload, c.MessageID, c.Key, c.CorrelationID, int32(c.MaxAttempts),
			metadataJSON(c.Metadata), c.ConcurrencyKey, now).Scan(&id); err != nil {
			return err
		}
		jobs, err := tx.batchAdd(ctx, id, p.Jobs)
		if err != nil {
			return err
		}
		res.Jobs = jobs
		if !p.Open {
			if err := tx.batchSeal(ctx, id, now); err != nil {
				return err
			}
		}
		res.Batch, err = tx.batchGet(ctx, id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("insert batch: %w", err)
	}
	return res, nil
}

// batchAdd inserts jobs into batch id and counts those inserted.
func (e *executor) batchAdd(ctx context.Context, id int64, jobs []*twicestore.JobInsertParams) ([]*twicestore.JobInsertResult, error) {
	for _, j := range jobs {
		j.BatchID = id
	}
	r, err := e.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: jobs})
	if err != nil {
		return nil, err
	}
	_, err = e.q.exec(ctx, `UPDATE twice_batches SET total = total + $1, pending = pending + $1 WHERE id = $2`,
		driverkit.Joined(r.Jobs), id)
	return r.Jobs, err
}

// batchSeal seals batch id and, when nothing is pending, inserts its
// callback (as the batch trigger would have, had a job finished last).
// The UPDATE locks the batch row, so a job finishing at once waits and
// then sees it sealed, or went first and left the callback to this.
func (e *executor) batchSeal(ctx context.Context, id int64, now time.Time) error {
	var fire bool
	err := e.q.queryRow(ctx, `UPDATE twice_batches SET sealed = true,
		callback_state = CASE WHEN callback_state = 0 AND pending = 0 AND (NOT on_success OR (dead = 0 AND cancelled = 0))
			THEN 1 ELSE callback_state END,
		finished_at = CASE WHEN callback_state = 0 AND pending = 0 THEN coalesce(finished_at, $2) ELSE finished_at END
		WHERE id = $1 RETURNING callback_state = 1`, id, now).Scan(&fire)
	if isNoRows(err) {
		return twicestore.ErrNotFound
	}
	if err != nil || !fire {
		return err
	}
	_, err = e.q.exec(ctx, `WITH cb AS (
			INSERT INTO twice_jobs (kind, queue, priority, args, message_id, idempotency_key,
				correlation_id, max_attempts, run_at, created_at, metadata, concurrency_key)
			SELECT kind, queue, priority, args, message_id, idempotency_key, correlation_id, max_attempts,
				$2, $2, metadata, concurrency_key
			FROM twice_batches WHERE id = $1
			RETURNING id, queue
		)
		UPDATE twice_batches AS b SET callback_state = 2, callback_job_id = cb.id, finished_at = $2
		FROM cb WHERE b.id = $1 AND pg_notify($3, cb.queue) IS NOT NULL`, id, now, e.notify.channel)
	return err
}

// BatchAdd adds jobs to an open batch. The row lock taken first keeps a
// concurrent seal from slipping between the check and the insert.
func (e *executor) BatchAdd(ctx context.Context, p *twicestore.BatchAddParams) (*twicestore.BatchAddResult, error) {
	res := &twicestore.BatchAddResult{}
	err := e.inTx(ctx, func(tx *executor) error {
		var sealed bool
		err := tx.q.queryRow(ctx, `SELECT sealed FROM twice_batches WHERE id = $1 FOR UPDATE`, p.ID).Scan(&sealed)
		switch {
		case isNoRows(err):
			return twicestore.ErrNotFound
		case err != nil:
			return err
		case sealed:
			return twicestore.ErrBatchSealed
		}
		if res.Jobs, err = tx.batchAdd(ctx, p.ID, p.Jobs); err != nil {
			return err
		}
		res.Batch, err = tx.batchGet(ctx, p.ID)
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
	err := e.inTx(ctx, func(tx *executor) error {
		if err := tx.batchSeal(ctx, p.ID, nowOr(p.Now)); err != nil {
			return err
		}
		var err error
		b, err = tx.batchGet(ctx, p.ID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("seal batch %d: %w", p.ID, err)
	}
	return b, nil
}

// BatchGet returns a batch.
func (e *executor) BatchGet(ctx context.Context, p *twicestore.BatchGetParams) (*twicetype.Batch, error) {
	b, err := e.batchGet(ctx, p.ID)
	if err != nil {
		return nil, fmt.Errorf("get batch %d: %w", p.ID, err)
	}
	return b, nil
}

// BatchList lists one page of batches, newest first.
func (e *executor) BatchList(ctx context.Context, p *twicestore.BatchListParams) (*twicestore.BatchListResult, error) {
	before, limit := p.Page()
	rs, err := e.q.query(ctx, `SELECT `+driverkit.BatchColumns+` FROM twice_batches
		WHERE id < $1 AND (NOT $2 OR finished_at IS NULL) ORDER BY id DESC LIMIT $3`, before, p.Unfinished, limit)
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
	jobs, err := queryJobs(ctx, e.q, `SELECT `+jobColumns+` FROM twice_jobs AS j WHERE j.parent_id = $1 ORDER BY j.id LIMIT $2`,
		p.ParentID, limitArg(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list children of job %d: %w", p.ParentID, err)
	}
	return jobs, nil
}

// WorkflowTaskOf finds a job's task and its dependencies' jobs.
func (e *executor) WorkflowTaskOf(ctx context.Context, p *twicestore.WorkflowTaskOfParams) (*twicestore.WorkflowTaskOfResult, error) {
	res := &twicestore.WorkflowTaskOfResult{Deps: map[string]int64{}}
	var wf *int64
	err := e.q.queryRow(ctx, `SELECT workflow_id, workflow_task FROM twice_jobs WHERE id = $1`, p.JobID).Scan(&wf, &res.Task)
	if isNoRows(err) || (err == nil && wf == nil) {
		return nil, fmt.Errorf("workflow task of job %d: %w", p.JobID, twicestore.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("workflow task of job %d: %w", p.JobID, err)
	}
	res.WorkflowID = *wf
	rs, err := e.q.query(ctx, `SELECT d.dep, j.id FROM twice_workflow_deps AS d
		JOIN twice_jobs AS j ON j.workflow_id = d.workflow_id AND j.workflow_task = d.dep
		WHERE d.workflow_id = $1 AND d.task = $2`, res.WorkflowID, res.Task)
	if err != nil {
		return nil, fmt.Errorf("workflow task of job %d: %w", p.JobID, err)
	}
	if res.Deps, err = dbrows.Pairs[string, int64](rs); err != nil {
		return nil, fmt.Errorf("workflow task of job %d: %w", p.JobID, err)
	}
	return res, nil
}

// scanWorkflow and scanBatch read one row of driverkit.WorkflowColumns and
// driverkit.BatchColumns, their times as time.Time.
var (
	scanWorkflow = driverkit.WorkflowRow(driverkit.NativeTimes)
	scanBatch    = driverkit.BatchRow(driverkit.NativeTimes)
)
