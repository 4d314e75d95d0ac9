package twicepg

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// MarkerPeek reports whether handler has processed key.
func (e *executor) MarkerPeek(ctx context.Context, p *twicestore.MarkerParams) (*twicestore.MarkerPeekResult, error) {
	m, err := e.marker(ctx, p)
	return driverkit.PeekResult(p, m, err)
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

// ClaimLockTimeout is how long a MarkerClaim in a transaction the Store
// began (a Transactional job's) waits for another transaction's claim of
// the same marker that is neither committed nor rolled back. That other
// transaction is normally a worker frozen with the job's uncommitted
// effect (stopped, partitioned away): its lease expired, the job was
// rescued, and the new holder's claim would otherwise wait on the frozen
// one's insert for as long as its connection lives (30 s and more, bounded
// only by TCP keepalive). After ClaimLockTimeout the claim fails with an
// error wrapping twicestore.ErrLockTimeout; the transaction is then spoilt
// and rolled back, and the job is retried like any failed attempt, by
// which time the frozen holder has usually committed (the claim then
// reports AlreadyProcessed), rolled back (the claim succeeds) or lost its
// connection. The bound applies to the claim statement only (lock_timeout
// is set around it and put back), never to the handler's own statements.
//
// The worker's transactions get no idle_in_transaction_session_timeout:
// it would also end a healthy Transactional handler that keeps its
// transaction open while it waits on something slow outside the database.
const ClaimLockTimeout = 5 * time.Second

// sqlStateLockNotAvailable is PostgreSQL's SQLSTATE when lock_timeout
// expires (lock_not_available).
const sqlStateLockNotAvailable = "55P03"

// MarkerClaim records that handler processed key at Now (the current time
// when zero). A pair already claimed reports AlreadyProcessed and the claim
// found.
func (e *executor) MarkerClaim(ctx context.Context, p *twicestore.MarkerParams) (*twicestore.MarkerClaimResult, error) {
	n, err := e.claim(ctx, p)
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

// claim runs claimSQL, with lock_timeout set to e.claimLockTimeout for
// that statement alone when it is positive, and returns the rows inserted.
func (e *executor) claim(ctx context.Context, p *twicestore.MarkerParams) (int64, error) {
	args := []any{p.Handler, p.Key, nowOr(p.Now), p.JobID, p.Epoch}
	if e.claimLockTimeout <= 0 {
		return e.q.exec(ctx, claimSQL, args...)
	}
	// The select list is evaluated in order: the setting as it was, then
	// the new one, for this transaction only.
	var was, set string
	if err := e.q.queryRow(ctx, `SELECT current_setting('lock_timeout'), set_config('lock_timeout', $1, true)`,
		strconv.FormatInt(e.claimLockTimeout.Milliseconds(), 10)).Scan(&was, &set); err != nil {
		return 0, fmt.Errorf("bound the claim's lock wait: %w", err)
	}
	n, err := e.q.exec(ctx, claimSQL, args...)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == sqlStateLockNotAvailable {
		return 0, fmt.Errorf("%w: another transaction has held a claim of this marker, uncommitted, for over %s "+
			"(a frozen worker holding the job before it was rescued?); the attempt will be retried: %w",
			twicestore.ErrLockTimeout, e.claimLockTimeout, err)
	}
	if err != nil {
		return 0, err
	}
	if _, err := e.q.exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, was); err != nil {
		return 0, fmt.Errorf("restore lock_timeout: %w", err)
	}
	return n, nil
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

// pruneFromSQL is the statement pruneFrom runs on a table whose rows are
// keyed by key and pruned by the time column at: it deletes one batch of
// the rows of the earliest at before $1, from $3 on (the pass's cursor;
// see MarkerPruneParams.From), at most $2, and returns how many it
// deleted and the latest at among them. SKIP LOCKED lets nodes prune at
// once without deleting the same rows or waiting for each other, nor for
// a transaction that holds one of them (a marker being claimed, an
// idempotency record being begun).
func pruneFromSQL(table, key, at string) string {
	return fmt.Sprintf(`WITH gone AS (
	DELETE FROM %[1]s WHERE (%[2]s) IN (
		SELECT %[2]s FROM %[1]s
		WHERE %[3]s < $1 AND %[3]s >= $3
		ORDER BY %[3]s
		LIMIT $2
		FOR UPDATE SKIP LOCKED)
	RETURNING %[3]s
)
SELECT count(*), max(%[3]s) FROM gone`, table, key, at)
}

// The prune statements of markers, steps and idempotency records.
var (
	pruneSQL            = pruneFromSQL("twice_markers", "handler, key", "processed_at")
	stepPruneSQL        = pruneFromSQL("twice_steps", "handler, key, step", "claimed_at")
	idempotencyPruneSQL = pruneFromSQL("twice_idempotency", "principal, key", "expires_at")
)

// MarkerPrune deletes up to Limit markers processed before Before, oldest
// first; a Limit of zero or less deletes them all.
func (e *executor) MarkerPrune(ctx context.Context, p *twicestore.MarkerPruneParams) (*twicestore.MarkerPruneResult, error) {
	n, from, err := e.pruneFrom(ctx, pruneSQL, p.Before, limitArg(p.Limit), p.From)
	if err != nil {
		return nil, fmt.Errorf("prune markers: %w", err)
	}
	return &twicestore.MarkerPruneResult{Deleted: n, From: from}, nil
}

// pruneFrom runs a prune statement that goes on from a pass's cursor: it
// takes the cut-off, the limit and the cursor, and returns the count
// deleted and the latest time among them, which pruneFrom returns as the
// next batch's cursor (from itself when nothing was deleted).
func (e *executor) pruneFrom(ctx context.Context, query string, before time.Time, limit any, from time.Time) (int, time.Time, error) {
	var n int
	var last *time.Time
	if err := e.q.queryRow(ctx, query, before, limit, from).Scan(&n, &last); err != nil {
		return 0, time.Time{}, err
	}
	if last != nil {
		from = last.UTC()
	}
	return n, from, nil
}
