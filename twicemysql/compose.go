package twicemysql

// Composition: continuations (inserted by JobFinish), workflows and
// batches. The triggers of migration 002 keep the counters of batches and
// workflows in the statement that moves a job, and mark what became due; a
// trigger cannot insert into twice_jobs, whose statement fired it (MySQL's
// error 1442), so settleComposition inserts the jobs marked, before every
// commit of twice's own writes (see inTx).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
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
	if _, err := insertJobs(ctx, q, o.Children); err != nil {
		return fmt.Errorf("insert continuations of job %d: %w", o.ID, err)
	}
	return nil
}

// settleComposition inserts the jobs the statements of its transaction
// made due: batch callbacks and workflow tasks whose dependencies all
// completed. See settleDue.
func settleComposition(ctx context.Context, q dbtx) error {
	_, err := settleDue(ctx, q)
	return err
}

// settleDueSQL tells whether anything is due, by two index lookups of an
// empty range in the usual case. It is a plain read: it sees the marks of
// this transaction and the committed ones, not those of transactions
// still running, which settle their own.
const settleDueSQL = `SELECT EXISTS (SELECT 1 FROM twice_batches WHERE callback_state = 1)
	OR EXISTS (SELECT 1 FROM twice_workflow_tasks WHERE state = 'ready')`

// settleDue inserts the jobs the triggers of migration 002 marked due and
// returns how many it inserted (JobFinish reports them as Inserted). It
// locks the marked rows with SKIP LOCKED: a row another transaction
// marked and has not committed is that transaction's to settle; a row
// marked by a statement that committed without settling (an application's
// own SQL on twice_jobs) is settled by the next transaction that looks.
// Two transactions finishing siblings at once are ordered by the row
// locks of the counters the triggers update, so exactly one of them
// leaves the batch or the task due, and settles it.
func settleDue(ctx context.Context, q dbtx) (int, error) {
	var due bool
	if err := q.QueryRowContext(ctx, settleDueSQL).Scan(&due); err != nil {
		return 0, fmt.Errorf("settle composition: %w", err)
	}
	if !due {
		return 0, nil
	}
	callbacks, err := settleCallbacks(ctx, q)
	if err != nil {
		return 0, fmt.Errorf("settle composition: insert batch callbacks: %w", err)
	}
	tasks, err := settleTasks(ctx, q)
	if err != nil {
		return 0, fmt.Errorf("settle composition: release workflow tasks: %w", err)
	}
	return callbacks + tasks, nil
}

// insertCallbackSQL inserts the callback job of a batch whose callback is
// due, created and due when the batch finished, a child of the job whose
// finish made it due.
const insertCallbackSQL = `INSERT INTO twice_jobs (kind, queue, priority, args, message_id, idempotency_key,
	correlation_id, max_attempts, run_at, created_at, metadata, concurrency_key, parent_id)
SELECT kind, queue, priority, args, message_id, idempotency_key, correlation_id, max_attempts,
	COALESCE(finished_at, UTC_TIMESTAMP(6)), COALESCE(finished_at, UTC_TIMESTAMP(6)), metadata, concurrency_key,
	callback_parent_id
FROM twice_batches WHERE id = ? AND callback_state = 1`

// settleCallbacks inserts the callback of each batch marked due (that no
// other running transaction holds) and records it, one batch at a time
// (LastInsertId is the one id a single-row insert made).
func settleCallbacks(ctx context.Context, q dbtx) (int, error) {
	rows, err := q.QueryContext(ctx, `SELECT id FROM twice_batches WHERE callback_state = 1
		ORDER BY id FOR UPDATE SKIP LOCKED`)
	if err != nil {
		return 0, err
	}
	ids, err := dbrows.Collect(rows, dbrows.One[int64])
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		r, err := q.ExecContext(ctx, insertCallbackSQL, id)
		if err != nil {
			return n, fmt.Errorf("batch %d: %w", id, err)
		}
		k, err := r.RowsAffected()
		if err != nil {
			return n, fmt.Errorf("batch %d: callback insert: %w", id, err)
		}
		if k != 1 {
			return n, fmt.Errorf("batch %d: callback insert wrote %d rows, want 1", id, k)
		}
		jobID, err := r.LastInsertId()
		if err != nil {
			return n, fmt.Errorf("batch %d: %w", id, err)
		}
		if _, err := q.ExecContext(ctx, `UPDATE twice_batches SET callback_state = 2, callback_job_id = ?
			WHERE id = ?`, jobID, id); err != nil {
			return n, fmt.Errorf("batch %d: %w", id, err)
		}
		n++
	}
	return n, nil
}

// releasedSQL is when a ready task t is released: at its release's
// settling, and never before a dependency of its finished. The trigger's
// released_at alone is not enough: it is the start of the statement that
// completed the last dependency (MySQL's clock functions keep a
// statement's start), and a statement that finishes a batch of jobs can
// start before another dependency's finish (which it then waits for) was
// stamped; a worker's clock may also run ahead of the database's.
const releasedSQL = `GREATEST(COALESCE(t.released_at, UTC_TIMESTAMP(6)), UTC_TIMESTAMP(6),
		COALESCE((SELECT MAX(f.finished_at) FROM twice_workflow_deps AS fd
			JOIN twice_jobs AS f ON f.workflow_id = fd.workflow_id AND f.workflow_slot = fd.dep
			WHERE fd.workflow_id = t.workflow_id AND fd.task = t.name), UTC_TIMESTAMP(6)))`

// releaseTasksSQL inserts the jobs of ready tasks of one workflow (the IN
// list of names follows), created when released (releasedSQL) and due
// then or at the task's own run_at, whichever is later, and carrying the
// traces of its dependencies' jobs in task-name order (cut to the
// column's 1024 characters).
const releaseTasksSQL = `INSERT INTO twice_jobs (kind, queue, priority, args, message_id, idempotency_key,
	correlation_id, max_attempts, run_at, created_at, metadata, concurrency_key, workflow_id, workflow_task, trace)
SELECT t.kind, t.queue, t.priority, t.args, t.message_id, t.idempotency_key, t.correlation_id, t.max_attempts,
	GREATEST(COALESCE(t.run_at, ` + releasedSQL + `), ` + releasedSQL + `),
	` + releasedSQL + `, t.metadata, t.concurrency_key, t.workflow_id, t.name,
	COALESCE((SELECT LEFT(GROUP_CONCAT(j.trace ORDER BY j.workflow_task SEPARATOR ','), 1024)
		FROM twice_workflow_deps AS d
		JOIN twice_jobs AS j ON j.workflow_id = d.workflow_id AND j.workflow_slot = d.dep
		WHERE d.workflow_id = t.workflow_id AND d.task = t.name AND j.trace <> ''), '')
FROM twice_workflow_tasks AS t
WHERE t.workflow_id = ? AND t.state = 'ready' AND t.name IN `

// settleTasks inserts the job of each workflow task marked ready (that no
// other running transaction holds) and marks the task enqueued, one
// workflow at a time. The unique index on (workflow_id, workflow_slot)
// makes a second job of a task impossible.
func settleTasks(ctx context.Context, q dbtx) (int, error) {
	rows, err := q.QueryContext(ctx, `SELECT workflow_id, name FROM twice_workflow_tasks WHERE state = 'ready'
		ORDER BY workflow_id, name FOR UPDATE SKIP LOCKED`)
	if err != nil {
		return 0, err
	}
	type task struct {
		workflow int64
		name     string
	}
	ready, err := dbrows.Collect(rows, func(r rowScanner) (task, error) {
		var t task
		err := r.Scan(&t.workflow, &t.name)
		return t, err
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for start := 0; start < len(ready); {
		end := start
		var names []string
		for end < len(ready) && ready[end].workflow == ready[start].workflow {
			names = append(names, ready[end].name)
			end++
		}
		wf := ready[start].workflow
		list, args := in(names)
		r, err := q.ExecContext(ctx, releaseTasksSQL+list+` ORDER BY t.name`, append([]any{wf}, args...)...)
		if err != nil {
			return n, fmt.Errorf("workflow %d: %w", wf, err)
		}
		k, err := r.RowsAffected()
		if err != nil {
			return n, fmt.Errorf("workflow %d: %w", wf, err)
		}
		n += int(k)
		if _, err := q.ExecContext(ctx, `UPDATE twice_workflow_tasks SET state = 'enqueued'
			WHERE workflow_id = ? AND state = 'ready' AND name IN `+list, append([]any{wf}, args...)...); err != nil {
			return n, fmt.Errorf("workflow %d: %w", wf, err)
		}
		start = end
	}
	return n, nil
}

// getWorkflow reads one workflow, ErrNotFound when there is none.
func getWorkflow(ctx context.Context, q dbtx, id int64) (*twicetype.Workflow, error) {
	w, err := scanWorkflow(q.QueryRowContext(ctx, `SELECT `+driverkit.WorkflowColumns+` FROM twice_workflows WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, twicestore.ErrNotFound
	}
	return w, err
}

// rowsPerInsert bounds the rows of one multi-row INSERT, so a statement
// stays far below max_allowed_packet's usual 64 MiB and the 65,535
// placeholders of a server-side prepared statement.
const rowsPerInsert = 500

// insertValues runs head followed by one "(?, ...)" group per row, a chunk
// of rows at a time; row returns the values of row i.
func insertValues(ctx context.Context, q dbtx, head string, n int, row func(i int) []any) error {
	for start := 0; start < n; start += rowsPerInsert {
		end := min(start+rowsPerInsert, n)
		var (
			b    strings.Builder
			args []any
		)
		b.WriteString(head)
		for i := start; i < end; i++ {
			vals := row(i)
			if i > start {
				b.WriteString(", ")
			}
			group, _ := in(vals)
			b.WriteString(group)
			args = append(args, vals...)
		}
		if _, err := q.ExecContext(ctx, b.String(), args...); err != nil {
			return err
		}
	}
	return nil
}

// releaseRootsSQL enqueues a new workflow's tasks that wait for nothing,
// due when the workflow is stored or at the task's own run_at, whichever
// is later.
const releaseRootsSQL = `INSERT INTO twice_jobs (kind, queue, priority, args, message_id, idempotency_key, correlation_id,
	max_attempts, run_at, created_at, metadata, concurrency_key, workflow_id, workflow_task)
SELECT kind, queue, priority, args, message_id, idempotency_key, correlation_id,
	max_attempts, GREATEST(?, COALESCE(run_at, ?)), ?, metadata, concurrency_key, workflow_id, name
FROM twice_workflow_tasks WHERE workflow_id = ? AND state = 'waiting' AND pending = 0
ORDER BY name`

// WorkflowInsert stores the workflow, its tasks and edges, and enqueues its
// roots, in one transaction.
func (e *executor) WorkflowInsert(ctx context.Context, p *twicestore.WorkflowInsertParams) (*twicestore.WorkflowInsertResult, error) {
	now := dbTime(nowOr(p.CreatedAt))
	type edge struct{ dep, task string }
	var edges []edge
	for _, t := range p.Tasks {
		for _, d := range t.Deps {
			edges = append(edges, edge{d, t.Name})
		}
	}
	res := &twicestore.WorkflowInsertResult{}
	err := e.inTx(ctx, func(q dbtx) error {
		r, err := q.ExecContext(ctx, `INSERT INTO twice_workflows (name, on_dead, tasks, created_at) VALUES (?, ?, ?, ?)`,
			p.Name, p.OnDeadPolicy(), len(p.Tasks), now)
		if err != nil {
			return err
		}
		id, err := r.LastInsertId()
		if err != nil {
			return err
		}
		err = insertValues(ctx, q, `INSERT INTO twice_workflow_tasks (workflow_id, name, pending, kind, queue, priority,
			args, message_id, idempotency_key, correlation_id, max_attempts, metadata, concurrency_key, run_at) VALUES `,
			len(p.Tasks), func(i int) []any {
				t := p.Tasks[i]
				j := t.Job
				payload := j.Args
				if payload == nil {
					payload = []byte{}
				}
				return []any{id, t.Name, len(t.Deps), j.Kind, j.Queue, j.Priority, payload, j.MessageID, j.Key,
					j.CorrelationID, j.MaxAttempts, metadataJSON(j.Metadata), j.ConcurrencyKey, nullTime(j.RunAt)}
			})
		if err != nil {
			return fmt.Errorf("insert tasks: %w", err)
		}
		err = insertValues(ctx, q, `INSERT INTO twice_workflow_deps (workflow_id, dep, task) VALUES `, len(edges),
			func(i int) []any { return []any{id, edges[i].dep, edges[i].task} })
		if err != nil {
			return fmt.Errorf("insert dependencies: %w", err)
		}
		if _, err := q.ExecContext(ctx, releaseRootsSQL, now, now, now, id); err != nil {
			return fmt.Errorf("enqueue roots: %w", err)
		}
		if _, err := q.ExecContext(ctx, `UPDATE twice_workflow_tasks SET state = 'enqueued'
			WHERE workflow_id = ? AND state = 'waiting' AND pending = 0`, id); err != nil {
			return fmt.Errorf("enqueue roots: %w", err)
		}
		// The workflow's only jobs yet are its roots.
		if res.Jobs, err = queryJobs(ctx, q, `SELECT `+jobColumns+` FROM twice_jobs WHERE workflow_id = ? ORDER BY id`, id); err != nil {
			return fmt.Errorf("read roots: %w", err)
		}
		res.Workflow, err = getWorkflow(ctx, q, id)
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
	w, err := getWorkflow(ctx, e.db, p.ID)
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
	rs, err = e.db.QueryContext(ctx, `SELECT workflow_task, `+jobColumns+` FROM twice_jobs WHERE workflow_id = ?`, p.ID)
	if err != nil {
		return nil, fmt.Errorf("get workflow %d: %w", p.ID, err)
	}
	err = dbrows.Each(rs, func(row dbrows.Scanner) error {
		var name string
		j, err := scanJob(prefixScanner{row, &name})
		if err != nil {
			return err
		}
		res.SetJob(name, j)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("get workflow %d: %w", p.ID, err)
	}
	return res, nil
}

// prefixScanner scans one leading column into dest before the rest.
type prefixScanner struct {
	r    rowScanner
	dest *string
}

// Scan scans the leading column into p.dest and the others into dest.
func (p prefixScanner) Scan(dest ...any) error {
	return p.r.Scan(append([]any{p.dest}, dest...)...)
}

// WorkflowCancel cancels the workflow's waiting tasks and unfinished jobs
// in one transaction. It locks the workflow's unfinished jobs first, in id
// order, then the workflow: a completion locks its job and then (in the
// trigger) the workflow, so the other order could deadlock with it.
func (e *executor) WorkflowCancel(ctx context.Context, p *twicestore.WorkflowCancelParams) (*twicestore.WorkflowCancelResult, error) {
	now := dbTime(nowOr(p.Now))
	res := &twicestore.WorkflowCancelResult{}
	err := e.inTx(ctx, func(q dbtx) error {
		rs, err := q.QueryContext(ctx, `SELECT id FROM twice_jobs
			WHERE workflow_id = ? AND state IN ('available', 'running', 'waiting') ORDER BY id FOR UPDATE`, p.ID)
		if err != nil {
			return err
		}
		// A read that ended early must not pass for all of the jobs: the
		// rest would stay uncancelled in a workflow marked cancelled.
		ids, err := dbrows.Collect(rs, dbrows.One[int64])
		if err != nil {
			return err
		}
		if _, err := q.ExecContext(ctx, `UPDATE twice_workflows SET
			finished_at = IF(state = 'running', ?, finished_at),
			state = IF(state = 'running', 'cancelled', state)
			WHERE id = ?`, now, p.ID); err != nil {
			return err
		}
		// The workflow as the cancel left it, before its jobs' cancels
		// count them dead.
		if res.Workflow, err = getWorkflow(ctx, q, p.ID); err != nil {
			return err
		}
		r, err := q.ExecContext(ctx, `UPDATE twice_workflow_tasks SET state = 'cancelled'
			WHERE workflow_id = ? AND state IN ('waiting', 'ready')`, p.ID)
		if err != nil {
			return err
		}
		n, err := r.RowsAffected()
		if err != nil {
			return err
		}
		res.Tasks = int(n)
		if len(ids) == 0 {
			res.Jobs = &twicestore.JobBulkResult{}
		} else if res.Jobs, err = (&executor{db: q}).JobCancel(ctx, &twicestore.JobCancelParams{
			Filter: twicestore.JobFilter{IDs: ids}, By: p.By, Reason: p.Reason, Now: now}); err != nil {
			return err
		}
		return nil
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

// getBatch reads one batch, ErrNotFound when there is none.
func getBatch(ctx context.Context, q dbtx, id int64) (*twicetype.Batch, error) {
	b, err := scanBatch(q.QueryRowContext(ctx, `SELECT `+driverkit.BatchColumns+` FROM twice_batches WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, twicestore.ErrNotFound
	}
	return b, err
}

// BatchInsert stores the batch (open while its first jobs go in), its
// jobs, and seals it unless asked to keep it open.
func (e *executor) BatchInsert(ctx context.Context, p *twicestore.BatchInsertParams) (*twicestore.BatchInsertResult, error) {
	now := dbTime(nowOr(p.CreatedAt))
	c := p.Callback
	payload := c.Args
	if payload == nil {
		payload = []byte{}
	}
	res := &twicestore.BatchInsertResult{}
	err := e.inTx(ctx, func(q dbtx) error {
		r, err := q.ExecContext(ctx, `INSERT INTO twice_batches (on_success, sealed, kind, queue, priority, args,
			message_id, idempotency_key, correlation_id, max_attempts, metadata, concurrency_key, created_at)
			VALUES (?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			p.OnSuccess, c.Kind, c.Queue, c.Priority, payload, c.MessageID, c.Key, c.CorrelationID, c.MaxAttempts,
			metadataJSON(c.Metadata), c.ConcurrencyKey, now)
		if err != nil {
			return err
		}
		id, err := r.LastInsertId()
		if err != nil {
			return err
		}
		if res.Jobs, err = batchAdd(ctx, q, id, p.Jobs); err != nil {
			return err
		}
		if !p.Open {
			if err := batchSeal(ctx, q, id, now); err != nil {
				return err
			}
		}
		res.Batch, err = getBatch(ctx, q, id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("insert batch: %w", err)
	}
	return res, nil
}

// batchAdd inserts jobs into batch id and counts those inserted (a
// duplicate of a unique key held elsewhere does not join).
func batchAdd(ctx context.Context, q dbtx, id int64, jobs []*twicestore.JobInsertParams) ([]*twicestore.JobInsertResult, error) {
	if len(jobs) == 0 {
		return []*twicestore.JobInsertResult{}, nil
	}
	for _, j := range jobs {
		j.BatchID = id
	}
	out, err := insertJobs(ctx, q, jobs)
	if err != nil {
		return nil, err
	}
	if n := driverkit.Joined(out); n > 0 {
		_, err = q.ExecContext(ctx, `UPDATE twice_batches SET total = total + ?, pending = pending + ? WHERE id = ?`, n, n, id)
	}
	return out, err
}

// batchSeal seals batch id and, when nothing is pending, finishes it and
// inserts its callback when one is due (as the trigger would have, had a
// job finished last). The UPDATE locks the batch row, so a job finishing
// at once waits and then sees it sealed, or went first and left the
// callback to this. finished_at is assigned before callback_state, which
// it reads (see migration 002 on the order of assignments).
func batchSeal(ctx context.Context, q dbtx, id int64, now time.Time) error {
	if _, err := q.ExecContext(ctx, `UPDATE twice_batches SET
		finished_at = IF(callback_state = 0 AND pending = 0, COALESCE(finished_at, ?), finished_at),
		callback_state = IF(callback_state = 0 AND pending = 0 AND (on_success = 0 OR (dead = 0 AND cancelled = 0)),
			1, callback_state),
		sealed = 1
		WHERE id = ?`, now, id); err != nil {
		return err
	}
	return settleComposition(ctx, q)
}

// BatchAdd adds jobs to an open batch. The row lock taken first keeps a
// concurrent seal from slipping between the check and the insert.
func (e *executor) BatchAdd(ctx context.Context, p *twicestore.BatchAddParams) (*twicestore.BatchAddResult, error) {
	res := &twicestore.BatchAddResult{}
	err := e.inTx(ctx, func(q dbtx) error {
		var sealed bool
		err := q.QueryRowContext(ctx, `SELECT sealed FROM twice_batches WHERE id = ? FOR UPDATE`, p.ID).Scan(&sealed)
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
		res.Batch, err = getBatch(ctx, q, p.ID)
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
		if err := batchSeal(ctx, q, p.ID, dbTime(nowOr(p.Now))); err != nil {
			return err
		}
		var err error
		b, err = getBatch(ctx, q, p.ID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("seal batch %d: %w", p.ID, err)
	}
	return b, nil
}

// BatchGet returns a batch.
func (e *executor) BatchGet(ctx context.Context, p *twicestore.BatchGetParams) (*twicetype.Batch, error) {
	b, err := getBatch(ctx, e.db, p.ID)
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
	query, args := `SELECT `+jobColumns+` FROM twice_jobs WHERE parent_id = ? ORDER BY id`, []any{p.ParentID}
	if p.Limit > 0 {
		query, args = query+` LIMIT ?`, append(args, p.Limit)
	}
	jobs, err := queryJobs(ctx, e.db, query, args...)
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
		JOIN twice_jobs AS j ON j.workflow_id = d.workflow_id AND j.workflow_slot = d.dep
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
// driverkit.BatchColumns, their times as time.Time.
var (
	scanWorkflow = driverkit.WorkflowRow(driverkit.NativeTimes)
	scanBatch    = driverkit.BatchRow(driverkit.NativeTimes)
)
