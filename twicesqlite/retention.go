package twicesqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/twicejobs/twice/twicestore"
)

// A workflow or batch is pruned when nothing can move it any more: no job
// of it is left (and, for a batch, no callback job, and no BatchAdd or
// BatchSeal to come: it is sealed). The probes use twice_jobs_workflow_task
// and twice_jobs_batch; tasks and dependency rows go by ON DELETE CASCADE.
const (
	workflowGoneSQL = `NOT EXISTS (SELECT 1 FROM twice_jobs AS j WHERE j.workflow_id = twice_workflows.id)`
	batchGoneSQL    = `sealed = 1
	AND NOT EXISTS (SELECT 1 FROM twice_jobs AS j WHERE j.batch_id = twice_batches.id)
	AND (callback_job_id IS NULL OR NOT EXISTS (SELECT 1 FROM twice_jobs AS j WHERE j.id = twice_batches.callback_job_id))`
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

// pruneScan looks at the limit lowest ids of table after after and
// deletes those rows among them that match gone, in one transaction: the
// page is read first, so the result can say where the next page starts.
func (e *executor) pruneScan(ctx context.Context, table, gone string, after int64, limit int) (*twicestore.PruneScanResult, error) {
	if limit <= 0 {
		limit = -1
	}
	res := &twicestore.PruneScanResult{}
	err := e.inTx(ctx, func(q dbtx) error {
		var looked int
		var last int64
		if err := q.QueryRowContext(ctx, `SELECT count(*), coalesce(max(id), 0) FROM (
			SELECT id FROM `+table+` WHERE id > ? ORDER BY id LIMIT ?)`, after, limit).Scan(&looked, &last); err != nil {
			return err
		}
		if looked == 0 {
			return nil
		}
		r, err := q.ExecContext(ctx, `DELETE FROM `+table+` WHERE id > ? AND id <= ? AND `+gone, after, last)
		if err != nil {
			return err
		}
		n, err := r.RowsAffected()
		if err != nil {
			return err
		}
		res.Deleted = int(n)
		if looked == limit {
			res.Next = last
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// ToggleHistoryPrune deletes up to Limit history rows changed before
// Before, oldest first, but never a kind's newest (found by
// twice_toggle_history_kind).
func (e *executor) ToggleHistoryPrune(ctx context.Context, p *twicestore.ToggleHistoryPruneParams) (*twicestore.PruneResult, error) {
	n, err := e.pruneBefore(ctx, `DELETE FROM twice_toggle_history WHERE id IN (
		SELECT h.id FROM twice_toggle_history AS h
		WHERE h.changed_at < ?
		  AND EXISTS (SELECT 1 FROM twice_toggle_history AS n WHERE n.kind = h.kind AND n.id > h.id)
		ORDER BY h.id LIMIT ?)`, p.Before, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("prune switch history: %w", err)
	}
	return &twicestore.PruneResult{Deleted: n}, nil
}

// NodePrune deletes up to Limit nodes whose last heartbeat is before
// HeartbeatBefore, oldest first.
func (e *executor) NodePrune(ctx context.Context, p *twicestore.NodePruneParams) (*twicestore.PruneResult, error) {
	n, err := e.pruneBefore(ctx, `DELETE FROM twice_nodes WHERE id IN (
		SELECT id FROM twice_nodes WHERE heartbeat_at < ? ORDER BY heartbeat_at LIMIT ?)`, p.HeartbeatBefore, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("prune nodes: %w", err)
	}
	return &twicestore.PruneResult{Deleted: n}, nil
}

// pruneBefore runs a prune statement taking a cut-off and a limit; a zero
// cut-off deletes nothing, a limit of zero or less has none.
func (e *executor) pruneBefore(ctx context.Context, query string, before time.Time, limit int) (int, error) {
	if before.IsZero() {
		return 0, nil
	}
	if limit <= 0 {
		limit = -1
	}
	var n int64
	err := e.write(ctx, func() error {
		r, err := e.db.ExecContext(ctx, query, micros(before), limit)
		if err != nil {
			return err
		}
		n, err = r.RowsAffected()
		return err
	})
	return int(n), err
}
