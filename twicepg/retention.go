package twicepg

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
// SKIP LOCKED leaves a row another transaction holds (a counter update, a
// cancel, another node's prune) to the next pass.
const (
	workflowGoneSQL = `NOT EXISTS (SELECT 1 FROM twice_jobs AS j WHERE j.workflow_id = t.id)`
	batchGoneSQL    = `t.sealed
	AND NOT EXISTS (SELECT 1 FROM twice_jobs AS j WHERE j.batch_id = t.id)
	AND (t.callback_job_id IS NULL OR NOT EXISTS (SELECT 1 FROM twice_jobs AS j WHERE j.id = t.callback_job_id))`
)

// pruneScanSQL looks at one page of ids of a table (%[1]s) and deletes
// the rows among them that match %[2]s, in one statement; it returns how
// many it looked at, the highest of them and how many it deleted.
const pruneScanSQL = `WITH page AS (
	SELECT id FROM %[1]s WHERE id > $1 ORDER BY id LIMIT $2
), doomed AS (
	SELECT t.id FROM %[1]s AS t
	WHERE t.id IN (SELECT id FROM page) AND %[2]s
	FOR UPDATE OF t SKIP LOCKED
), gone AS (
	DELETE FROM %[1]s WHERE id IN (SELECT id FROM doomed) RETURNING id
)
SELECT (SELECT count(*) FROM page), (SELECT coalesce(max(id), 0) FROM page), (SELECT count(*) FROM gone)`

var (
	workflowPruneSQL = fmt.Sprintf(pruneScanSQL, "twice_workflows", workflowGoneSQL)
	batchPruneSQL    = fmt.Sprintf(pruneScanSQL, "twice_batches", batchGoneSQL)
)

// WorkflowPrune deletes, in one page of ids, the workflows no job
// belongs to any more, with their tasks and dependency rows.
func (e *executor) WorkflowPrune(ctx context.Context, p *twicestore.WorkflowPruneParams) (*twicestore.PruneScanResult, error) {
	res, err := e.pruneScan(ctx, workflowPruneSQL, p.After, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("prune workflows after %d: %w", p.After, err)
	}
	return res, nil
}

// BatchPrune deletes, in one page of ids, the sealed batches no job
// belongs to any more and whose callback job is gone.
func (e *executor) BatchPrune(ctx context.Context, p *twicestore.BatchPruneParams) (*twicestore.PruneScanResult, error) {
	res, err := e.pruneScan(ctx, batchPruneSQL, p.After, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("prune batches after %d: %w", p.After, err)
	}
	return res, nil
}

func (e *executor) pruneScan(ctx context.Context, query string, after int64, limit int) (*twicestore.PruneScanResult, error) {
	var looked, deleted int
	var last int64
	if err := e.q.queryRow(ctx, query, after, limitArg(limit)).Scan(&looked, &last, &deleted); err != nil {
		return nil, err
	}
	res := &twicestore.PruneScanResult{Deleted: deleted}
	if limit > 0 && looked == limit {
		res.Next = last
	}
	return res, nil
}

// toggleHistoryPruneSQL deletes one batch of the oldest history rows
// changed before $1, but never a kind's newest (found by
// twice_toggle_history_kind).
const toggleHistoryPruneSQL = `DELETE FROM twice_toggle_history WHERE id IN (
	SELECT h.id FROM twice_toggle_history AS h
	WHERE h.changed_at < $1
	  AND EXISTS (SELECT 1 FROM twice_toggle_history AS n WHERE n.kind = h.kind AND n.id > h.id)
	ORDER BY h.id LIMIT $2
	FOR UPDATE SKIP LOCKED)`

// ToggleHistoryPrune deletes up to Limit history rows changed before
// Before, oldest first, but never a kind's newest.
func (e *executor) ToggleHistoryPrune(ctx context.Context, p *twicestore.ToggleHistoryPruneParams) (*twicestore.PruneResult, error) {
	n, err := e.pruneBefore(ctx, toggleHistoryPruneSQL, p.Before, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("prune switch history: %w", err)
	}
	return &twicestore.PruneResult{Deleted: n}, nil
}

// nodePruneSQL deletes one batch of the nodes whose last heartbeat is
// before $1, oldest first.
const nodePruneSQL = `DELETE FROM twice_nodes WHERE id IN (
	SELECT id FROM twice_nodes WHERE heartbeat_at < $1
	ORDER BY heartbeat_at LIMIT $2
	FOR UPDATE SKIP LOCKED)`

// NodePrune deletes up to Limit nodes whose last heartbeat is before
// HeartbeatBefore, oldest first.
func (e *executor) NodePrune(ctx context.Context, p *twicestore.NodePruneParams) (*twicestore.PruneResult, error) {
	n, err := e.pruneBefore(ctx, nodePruneSQL, p.HeartbeatBefore, p.Limit)
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
	n, err := e.q.exec(ctx, query, before, limitArg(limit))
	return int(n), err
}
