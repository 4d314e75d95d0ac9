package twicemysql

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
)

// replayPreviewSQL reads what decides a replay of each matched job in one
// statement: the candidates are read in id order, and each is joined with
// its marker by primary key, its steps by the primary key's (handler, key)
// prefix, and the holder of its unique key through the unique index
// (kind, unique_holder), whose generated column is the key while
// driverkit.UniqueHeldSQL holds. Its verbs are, in order: the filter's
// conditions, the states read (literals), the LIMIT clause and the
// handler of each candidate (a CASE over the kinds the caller named).
const replayPreviewSQL = `WITH c AS (
	SELECT id, kind, state, idempotency_key AS idem_key, unique_key,
		COALESCE(workflow_id, 0) AS workflow_id, workflow_task, COALESCE(batch_id, 0) AS batch_id
	FROM twice_jobs
	WHERE %s AND state IN (%s) AND id > ?
	ORDER BY id%s
),
ch AS (
	SELECT c.*, %s AS handler FROM c
)
SELECT ch.id, ch.kind, ch.state, ch.unique_key, ch.workflow_id, ch.workflow_task, ch.batch_id,
	m.handler IS NOT NULL, COALESCE(m.job_id, 0),
	(SELECT COUNT(*) FROM twice_steps AS s WHERE s.handler = ch.handler AND s.` + "`key`" + ` = ch.idem_key AND s.done_at IS NULL),
	(SELECT COUNT(*) FROM twice_steps AS s WHERE s.handler = ch.handler AND s.` + "`key`" + ` = ch.idem_key AND s.done_at IS NOT NULL),
	COALESCE((SELECT MIN(h.id) FROM twice_jobs AS h
		WHERE ch.unique_key <> '' AND h.kind = ch.kind AND h.unique_holder = ch.unique_key AND h.id <> ch.id), 0)
FROM ch
LEFT JOIN twice_markers AS m ON m.handler = ch.handler AND m.` + "`key`" + ` = ch.idem_key
ORDER BY ch.id`

// JobRetryPreview reads what decides a replay of up to Limit matched jobs
// in one statement, and classifies each (see twicestore.ClassifyReplay).
func (e *executor) JobRetryPreview(ctx context.Context, p *twicestore.JobRetryPreviewParams) (*twicestore.JobRetryPreviewResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	states := make([]string, 0, 4)
	for _, st := range p.States() {
		states = append(states, "'"+string(st)+"'") // a closed set of lower-case words
	}
	where, args := filterSQL(p.Filter)
	args = append(args, p.AfterID)
	// A job's handler is its kind's as the caller named it, else the kind
	// itself; kinds compare by their bytes (kind is VARBINARY).
	handler := "c.kind"
	if len(p.Kinds) > 0 {
		var sb strings.Builder
		sb.WriteString("CASE c.kind")
		for _, kind := range slices.Sorted(maps.Keys(p.Kinds)) {
			sb.WriteString(" WHEN ? THEN ?")
			args = append(args, kind, p.Handler(kind))
		}
		sb.WriteString(" ELSE c.kind END")
		handler = sb.String()
	}
	query := fmt.Sprintf(replayPreviewSQL, where, strings.Join(states, ", "), limitSQL(p.Limit), handler)
	rs, err := e.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("preview retry: %w", err)
	}
	jobs, err := dbrows.Collect(rs, driverkit.ReplayJobRow)
	if err != nil {
		return nil, fmt.Errorf("preview retry: %w", err)
	}
	p.Classify(jobs)
	return &twicestore.JobRetryPreviewResult{Jobs: jobs}, nil
}

// JobHistoryAppend appends one entry to the error history of each job of
// p.IDs in one statement, keeping the history trimmed as every append
// does (appendError).
func (e *executor) JobHistoryAppend(ctx context.Context, p *twicestore.JobHistoryAppendParams) error {
	if len(p.IDs) == 0 {
		return nil
	}
	entry, err := json.Marshal([]any{p.Entry})
	if err != nil {
		return fmt.Errorf("append to job history: %w", err)
	}
	list, ids := in(p.IDs)
	_, err = e.db.ExecContext(ctx, `UPDATE twice_jobs SET errors = `+appendError("?")+` WHERE id IN `+list,
		append([]any{string(entry), string(entry)}, ids...)...)
	if err != nil {
		return fmt.Errorf("append to job history: %w", mapError(err))
	}
	return nil
}
