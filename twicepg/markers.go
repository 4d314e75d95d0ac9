package twicepg

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// MarkerPeek reports whether handler has processed key.
func (e *executor) MarkerPeek(ctx context.Context, p *twicestore.MarkerParams) (*twicestore.MarkerPeekResult, error) {
	m, err := e.marker(ctx, p)
	switch {
	case errors.Is(err, twicestore.ErrNotFound):
		return &twicestore.MarkerPeekResult{}, nil
	case err != nil:
		return nil, fmt.Errorf("peek marker %q/%q: %w", p.Handler, p.Key, err)
	}
	return &twicestore.MarkerPeekResult{Processed: true, Marker: m}, nil
}

// marker reads one claim, or ErrNotFound.
func (e *executor) marker(ctx context.Context, p *twicestore.MarkerParams) (*twicetype.Marker, error) {
	m := &twicetype.Marker{Handler: p.Handler, Key: p.Key}
	var jobID, epoch *int64
	err := e.q.queryRow(ctx,
		`SELECT processed_at, job_id, epoch FROM twice_markers WHERE handler = $1 AND key = $2`, p.Handler, p.Key,
	).Scan(&m.ProcessedAt, &jobID, &epoch)
	if isNoRows(err) {
		return nil, twicestore.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	m.ProcessedAt = m.ProcessedAt.UTC()
	if jobID != nil && epoch != nil {
		m.JobID, m.Epoch = *jobID, *epoch
	}
	return m, nil
}

// peekManySQL answers a batch of peeks with the positions (ord) of the
// markers that exist.
const peekManySQL = `SELECT p.ord FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS p(handler, key, ord)
WHERE EXISTS (SELECT 1 FROM twice_markers AS m WHERE m.handler = p.handler AND m.key = p.key)`

// MarkerPeekMany answers many peeks in one statement.
func (e *executor) MarkerPeekMany(ctx context.Context, p *twicestore.MarkerPeekManyParams) (*twicestore.MarkerPeekManyResult, error) {
	n := len(p.Markers)
	res := &twicestore.MarkerPeekManyResult{Processed: make([]bool, n)}
	if n == 0 {
		return res, nil
	}
	handlers, keys := make([]string, n), make([]string, n)
	for i, m := range p.Markers {
		handlers[i], keys[i] = m.Handler, m.Key
	}
	ords, err := queryIDs(ctx, e.q, peekManySQL, handlers, keys)
	if err != nil {
		return nil, fmt.Errorf("peek %d markers: %w", n, err)
	}
	for _, ord := range ords {
		if ord < 1 || ord > int64(n) {
			return nil, fmt.Errorf("peek %d markers: returned position %d", n, ord)
		}
		res.Processed[ord-1] = true
	}
	return res, nil
}

// claimSQL names the primary key as its conflict target, so a duplicate is
// the only failure it turns into "no row inserted": a NOT NULL or CHECK
// failure is still an error. Unlike a plain INSERT whose unique violation is
// classified afterwards, it does not abort the caller's transaction (in
// PostgreSQL any error does), so a handler can go on in its transaction
// after a duplicate claim, and it leaves no ERROR line in the server's log
// for what twice treats as routine.
const claimSQL = `INSERT INTO twice_markers (handler, key, processed_at, job_id, epoch)
VALUES ($1, $2, $3, NULLIF($4::bigint, 0), NULLIF($5::bigint, 0))
ON CONFLICT (handler, key) DO NOTHING`

// MarkerClaim records that handler processed key at Now (the current time
// when zero). A pair already claimed reports AlreadyProcessed and the claim
// found.
func (e *executor) MarkerClaim(ctx context.Context, p *twicestore.MarkerParams) (*twicestore.MarkerClaimResult, error) {
	n, err := e.q.exec(ctx, claimSQL, p.Handler, p.Key, nowOr(p.Now), p.JobID, p.Epoch)
	if err != nil {
		return nil, fmt.Errorf("claim marker %q/%q: %w", p.Handler, p.Key, err)
	}
	if n == 1 {
		return &twicestore.MarkerClaimResult{}, nil
	}
	// The conflicting claim is committed (ON CONFLICT waited for it), so it
	// can be read; a release in between reads as a claim without details.
	existing, err := e.marker(ctx, p)
	if errors.Is(err, twicestore.ErrNotFound) {
		existing, err = &twicetype.Marker{Handler: p.Handler, Key: p.Key}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claim marker %q/%q: read the existing claim: %w", p.Handler, p.Key, err)
	}
	return &twicestore.MarkerClaimResult{AlreadyProcessed: true, Existing: existing}, nil
}

// sqlStateUniqueViolation is PostgreSQL's SQLSTATE for a duplicate key.
const sqlStateUniqueViolation = "23505"

// isUniqueViolation reports whether err is PostgreSQL refusing a duplicate.
// PostgreSQL reports a conflict on a PRIMARY KEY, a UNIQUE constraint and a
// unique (even partial) index alike as SQLSTATE 23505 unique_violation, so
// one code covers what SQL Server splits into 2627 and 2601.
func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == sqlStateUniqueViolation
}

// MarkerRelease deletes handler's claim on key; releasing an unclaimed pair
// is not an error.
func (e *executor) MarkerRelease(ctx context.Context, p *twicestore.MarkerParams) error {
	if _, err := e.q.exec(ctx, `DELETE FROM twice_markers WHERE handler = $1 AND key = $2`, p.Handler, p.Key); err != nil {
		return fmt.Errorf("release marker %q/%q: %w", p.Handler, p.Key, err)
	}
	return nil
}

// pruneSQL deletes one batch of the oldest markers. SKIP LOCKED lets nodes
// prune at once without deleting the same rows or waiting for each other,
// nor for a transaction that is claiming one of them.
const pruneSQL = `DELETE FROM twice_markers WHERE (handler, key) IN (
	SELECT handler, key FROM twice_markers
	WHERE processed_at < $1
	ORDER BY processed_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED
)`

// MarkerPrune deletes up to Limit markers processed before Before, oldest
// first; a Limit of zero or less deletes them all.
func (e *executor) MarkerPrune(ctx context.Context, p *twicestore.MarkerPruneParams) (*twicestore.MarkerPruneResult, error) {
	n, err := e.q.exec(ctx, pruneSQL, p.Before, limitArg(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("prune markers: %w", err)
	}
	return &twicestore.MarkerPruneResult{Deleted: int(n)}, nil
}
