package twicemysql

import (
	"context"
	"fmt"
	"time"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/twicestore"
)

// A workflow or batch is pruned when nothing can move it any more: no job
// of it is left (and, for a batch, no callback job, and no BatchAdd or
// BatchSeal to come: it is sealed). The probes use twice_jobs_workflow_task
// and twice_jobs_batch; tasks and dependency rows go by ON DELETE CASCADE.
const (
	workflowGoneSQL = `NOT EXISTS (SELECT 1 FROM twice_jobs AS j WHERE j.workflow_id = t.id)`
	batchGoneSQL    = `t.sealed = 1
	AND NOT EXISTS (SELECT 1 FROM twice_jobs AS j WHERE j.batch_id = t.id)
	AND (t.callback_job_id IS NULL OR NOT EXISTS (SELECT 1 FROM twice_jobs AS j WHERE j.id = t.callback_job_id))`
)

// WorkflowPrune deletes, in one page of ids, the workflows no job
// belongs to any more, with their tasks and dependency rows.
func (e *executor) WorkflowPrune(ctx context.Context, p *twicestore.WorkflowPruneParams) (*twicestore.PruneScanResult, error) {
	res, err := e.pruneScan(ctx, "twice_workflows", workflowGoneSQL, p.After, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("prune workflows after %d: %w", p.After, err)
	}
	return res, nil
}

// BatchPrune deletes, in one page of ids, the sealed batches no job
// belongs to any more and whose callback job is gone.
func (e *executor) BatchPrune(ctx context.Context, p *twicestore.BatchPruneParams) (*twicestore.PruneScanResult, error) {
	res, err := e.pruneScan(ctx, "twice_batches", batchGoneSQL, p.After, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("prune batches after %d: %w", p.After, err)
	}
	return res, nil
}

// pruneScan looks at the limit lowest ids of table (aliased t in gone)
// after after and deletes those rows among them that match gone, in one
// transaction: the page is read first, so the result can say where the
// next page starts. The rows to delete are locked with SKIP LOCKED: one
// another transaction holds (a counter update, a cancel, another node's
// prune) is left to the next pass.
func (e *executor) pruneScan(ctx context.Context, table, gone string, after int64, limit int) (*twicestore.PruneScanResult, error) {
	res := &twicestore.PruneScanResult{}
	err := e.inTx(ctx, func(q dbtx) error {
		var (
			looked int
			last   int64
		)
		if err := q.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(MAX(id), 0) FROM (
			SELECT id FROM `+table+` WHERE id > ? ORDER BY id`+limitClause(limit)+`) AS page`, after).
			Scan(&looked, &last); err != nil {
			return err
		}
		if looked == 0 {
			return nil
		}
		rows, err := q.QueryContext(ctx, `SELECT t.id FROM `+table+` AS t WHERE t.id > ? AND t.id <= ? AND `+gone+`
			FOR UPDATE SKIP LOCKED`, after, last)
		if err != nil {
			return err
		}
		if res.Deleted, err = deleteIDs[int64](ctx, q, table, rows); err != nil {
			return err
		}
		if limit > 0 && looked == limit {
			res.Next = last
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// deleteIDs deletes the rows of table whose ids rows lists (one column),
// and says how many it deleted.
func deleteIDs[T any](ctx context.Context, q dbtx, table string, rows dbrows.Rows) (int, error) {
	ids, err := dbrows.Collect(rows, dbrows.One[T])
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	list, args := in(ids)
	r, err := q.ExecContext(ctx, `DELETE FROM `+table+` WHERE id IN `+list, args...)
	if err != nil {
		return 0, err
	}
	n, err := r.RowsAffected()
	return int(n), err
}

// ToggleHistoryPrune deletes up to Limit history rows changed before
// Before, oldest first, but never a kind's newest (found by
// twice_toggle_history_kind).
func (e *executor) ToggleHistoryPrune(ctx context.Context, p *twicestore.ToggleHistoryPruneParams) (*twicestore.PruneResult, error) {
	n, err := pruneBefore[int64](ctx, e, `SELECT h.id FROM twice_toggle_history AS h
		WHERE h.changed_at < ?
		  AND EXISTS (SELECT 1 FROM twice_toggle_history AS n WHERE n.kind = h.kind AND n.id > h.id)
		ORDER BY h.id`, "twice_toggle_history", p.Before, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("prune switch history: %w", err)
	}
	return &twicestore.PruneResult{Deleted: n}, nil
}

// NodePrune deletes up to Limit nodes whose last heartbeat is before
// HeartbeatBefore, oldest first.
func (e *executor) NodePrune(ctx context.Context, p *twicestore.NodePruneParams) (*twicestore.PruneResult, error) {
	n, err := pruneBefore[string](ctx, e, `SELECT id FROM twice_nodes WHERE heartbeat_at < ? ORDER BY heartbeat_at, id`,
		"twice_nodes", p.HeartbeatBefore, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("prune nodes: %w", err)
	}
	return &twicestore.PruneResult{Deleted: n}, nil
}

// pruneBefore deletes from table the rows whose ids (of type T) selectIDs
// lists, given a cut-off, oldest first; a zero cut-off deletes nothing, a
// limit of zero or less has none. The ids are selected first (FOR UPDATE
// SKIP LOCKED, leaving a row another transaction holds to the next pass)
// and deleted by id in the same transaction: MySQL refuses a DELETE whose
// subquery reads the table it deletes from (error 1093), and a LIMIT in
// an IN subquery (error 1235).
func pruneBefore[T any](ctx context.Context, e *executor, selectIDs, table string, before time.Time, limit int) (int, error) {
	if before.IsZero() {
		return 0, nil
	}
	var n int
	err := e.inTx(ctx, func(q dbtx) error {
		rows, err := q.QueryContext(ctx, selectIDs+limitClause(limit)+` FOR UPDATE SKIP LOCKED`, dbTime(before))
		if err != nil {
			return err
		}
		n, err = deleteIDs[T](ctx, q, table, rows)
		return err
	})
	return n, err
}
