package twicepg

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
// statement: the candidates are read from the state index in id order, and
// each is joined with its marker by primary key, its steps by the primary
// key's (handler, key) prefix, and the holder of its unique key by
// twice_jobs_unique_key, whose predicate driverkit.UniqueHeldSQL spells. A
// job's handler is its kind's as the caller named it ($1, $2), else the
// kind itself. The filter's conditions are numbered from $5.
const replayPreviewSQL = `WITH k AS (
	SELECT * FROM unnest($1::text[], $2::text[]) AS k(kind, handler)
),
c AS (
	SELECT j.id, j.kind, j.state, j.idempotency_key AS key, j.unique_key,
		coalesce(j.workflow_id, 0) AS workflow_id, j.workflow_task, coalesce(j.batch_id, 0) AS batch_id
	FROM twice_jobs AS j
	WHERE %s AND j.state IN (%s) AND j.id > $3
	ORDER BY j.id LIMIT $4
),
ch AS (
	SELECT c.*, coalesce(k.handler, c.kind) AS handler FROM c LEFT JOIN k ON k.kind = c.kind
)
SELECT ch.id, ch.kind, ch.state, ch.unique_key, ch.workflow_id, ch.workflow_task, ch.batch_id,
	m.handler IS NOT NULL, coalesce(m.job_id, 0),
	coalesce(st.open, 0), coalesce(st.done, 0),
	coalesce((SELECT h.id FROM twice_jobs AS h
		WHERE ch.unique_key <> '' AND h.kind = ch.kind AND h.unique_key = ch.unique_key AND h.id <> ch.id
			AND %s
		ORDER BY h.id LIMIT 1), 0)
FROM ch
LEFT JOIN twice_markers AS m ON m.handler = ch.handler AND m.key = ch.key
LEFT JOIN LATERAL (
	SELECT count(*) FILTER (WHERE s.done_at IS NULL) AS open, count(*) FILTER (WHERE s.done_at IS NOT NULL) AS done
	FROM twice_steps AS s WHERE s.handler = ch.handler AND s.key = ch.key
) AS st ON TRUE
ORDER BY ch.id`

// JobRetryPreview reads what decides a replay of up to Limit matched jobs
// in one statement, and classifies each (see twicestore.ClassifyReplay).
func (e *executor) JobRetryPreview(ctx context.Context, p *twicestore.JobRetryPreviewParams) (*twicestore.JobRetryPreviewResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	kinds := make([]string, 0, len(p.Kinds))
	handlers := make([]string, 0, len(p.Kinds))
	for kind := range p.Kinds {
		kinds, handlers = append(kinds, kind), append(handlers, p.Handler(kind))
	}
	states := make([]string, 0, 4)
	for _, st := range p.States() {
		states = append(states, stateLiteral(st))
	}
	where, fargs := filterSQL(p.Filter, 4)
	query := fmt.Sprintf(replayPreviewSQL, where, strings.Join(states, ", "), driverkit.UniqueHeldSQL("h"))
	args := append([]any{kinds, handlers, p.AfterID, limitArg(p.Limit)}, fargs...)
	rs, err := e.q.query(ctx, query, args...)
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
	if _, err := e.q.exec(ctx, `UPDATE twice_jobs AS j SET errors = `+keptErrors("j.errors || jsonb_build_array($2::jsonb)")+`
		WHERE j.id = ANY($1::bigint[])`, p.IDs, string(entry)); err != nil {
		return fmt.Errorf("append to job history: %w", err)
	}
	return nil
}
