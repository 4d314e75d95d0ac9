package twicesqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
)

// replayPreviewSQL reads what decides a replay of each matched job in one
// statement: each candidate is joined with its marker by primary key, its
// steps by the primary key's (handler, key) prefix, and the holder of its
// unique key through the (kind, unique_key) index. A job's handler is its
// kind's in the JSON object of the first argument, else the kind itself.
const replayPreviewSQL = `WITH c AS (
	SELECT id, kind, state, idempotency_key AS key, unique_key,
		coalesce(workflow_id, 0) AS workflow_id, workflow_task, coalesce(batch_id, 0) AS batch_id
	FROM twice_jobs
	WHERE %s AND state IN (%s) AND id > ?
	ORDER BY id LIMIT ?
),
ch AS (
	SELECT c.*, coalesce(k.value, c.kind) AS handler FROM c LEFT JOIN json_each(?) AS k ON k.key = c.kind
)
SELECT ch.id, ch.kind, ch.state, ch.unique_key, ch.workflow_id, ch.workflow_task, ch.batch_id,
	m.handler IS NOT NULL, coalesce(m.job_id, 0),
	(SELECT count(*) FROM twice_steps AS s WHERE s.handler = ch.handler AND s.key = ch.key AND s.done_at IS NULL),
	(SELECT count(*) FROM twice_steps AS s WHERE s.handler = ch.handler AND s.key = ch.key AND s.done_at IS NOT NULL),
	coalesce((SELECT h.id FROM twice_jobs AS h
		WHERE ch.unique_key <> '' AND h.kind = ch.kind AND h.unique_key = ch.unique_key AND h.id <> ch.id
			AND %s
		ORDER BY h.id LIMIT 1), 0)
FROM ch
LEFT JOIN twice_markers AS m ON m.handler = ch.handler AND m.key = ch.key
ORDER BY ch.id`

// JobRetryPreview reads what decides a replay of up to Limit matched jobs
// in one statement, and classifies each (see twicestore.ClassifyReplay).
func (e *executor) JobRetryPreview(ctx context.Context, p *twicestore.JobRetryPreviewParams) (*twicestore.JobRetryPreviewResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	handlers := make(map[string]string, len(p.Kinds))
	for kind := range p.Kinds {
		handlers[kind] = p.Handler(kind)
	}
	states := make([]string, 0, 4)
	for _, st := range p.States() {
		states = append(states, "'"+string(st)+"'") // a closed set of lower-case words
	}
	where, args := filterSQL(p.Filter)
	limit := p.Limit
	if limit <= 0 {
		limit = -1
	}
	args = append(args, p.AfterID, limit, jsonArg(handlers))
	query := fmt.Sprintf(replayPreviewSQL, where, strings.Join(states, ", "), driverkit.UniqueHeldSQL("h"))
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
// p.IDs in one statement.
func (e *executor) JobHistoryAppend(ctx context.Context, p *twicestore.JobHistoryAppendParams) error {
	entry, err := json.Marshal(p.Entry)
	if err != nil {
		return fmt.Errorf("append to job history: %w", err)
	}
	err = e.write(ctx, func() error {
		_, err := e.db.ExecContext(ctx, `UPDATE twice_jobs SET errors = `+
			keptErrors("json_insert(errors, '$[#]', json(?1))", "json_array_length(errors) + 1")+`
			WHERE id IN (SELECT value FROM json_each(?2))`, string(entry), jsonArg(p.IDs))
		return err
	})
	if err != nil {
		return fmt.Errorf("append to job history: %w", err)
	}
	return nil
}
