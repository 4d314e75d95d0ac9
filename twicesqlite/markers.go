package twicesqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/twicejobs/twice/internal/dbrows"
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
	var at, jobID, epoch sql.NullInt64
	err := e.db.QueryRowContext(ctx,
		`SELECT processed_at, job_id, epoch FROM twice_markers WHERE handler = ? AND key = ?`, p.Handler, p.Key,
	).Scan(&at, &jobID, &epoch)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, twicestore.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	m.ProcessedAt, m.JobID, m.Epoch = driverkit.FromNullMicros(at), jobID.Int64, epoch.Int64
	return m, nil
}

// peekManySQL answers a batch of peeks, given as one JSON array of
// [handler, key] pairs, with the positions (0-based) of the markers that
// exist.
const peekManySQL = `SELECT CAST(p.key AS INTEGER) FROM json_each(?) AS p
WHERE EXISTS (SELECT 1 FROM twice_markers AS m
	WHERE m.handler = p.value ->> 0 AND m.key = p.value ->> 1)`

// markersProcessed answers, in one statement, whether each of markers
// was claimed: what MarkerPeek would say of each, in input order. The
// fetch answers its ClaimAfter jobs' peeks with it.
func (e *executor) markersProcessed(ctx context.Context, markers []twicestore.MarkerParams) ([]bool, error) {
	n := len(markers)
	processed := make([]bool, n)
	if n == 0 {
		return processed, nil
	}
	pairs := make([][2]string, n)
	for i, m := range markers {
		pairs[i] = [2]string{m.Handler, m.Key}
	}
	rows, err := e.db.QueryContext(ctx, peekManySQL, jsonArg(pairs))
	if err != nil {
		return nil, fmt.Errorf("peek %d markers: %w", n, err)
	}
	positions, err := dbrows.Collect(rows, dbrows.One[int])
	if err != nil {
		return nil, fmt.Errorf("peek %d markers: %w", n, err)
	}
	for _, pos := range positions {
		if pos < 0 || pos >= n {
			return nil, fmt.Errorf("peek %d markers: returned position %d", n, pos)
		}
		processed[pos] = true
	}
	return processed, nil
}

// claimSQL is a plain INSERT on purpose: INSERT OR IGNORE would also swallow
// NOT NULL and CHECK failures, while a classified uniqueness error says
// exactly "already processed" and nothing else.
const claimSQL = `INSERT INTO twice_markers (handler, key, processed_at, job_id, epoch) VALUES (?, ?, ?, ?, ?)`

// MarkerClaim records that handler processed key at Now (the current time
// when zero). A pair already claimed reports AlreadyProcessed and the claim
// found.
func (e *executor) MarkerClaim(ctx context.Context, p *twicestore.MarkerParams) (*twicestore.MarkerClaimResult, error) {
	var res *twicestore.MarkerClaimResult
	err := e.write(ctx, func() (err error) {
		res, err = claimMarker(ctx, func(args ...any) (sql.Result, error) {
			return e.db.ExecContext(ctx, claimSQL, args...)
		}, p)
		if err != nil || !res.AlreadyProcessed {
			return err
		}
		// Still under the write gate, so the claim read is the one that
		// refused this one (unless released in between, which reads as
		// a claim without details).
		res.Existing, err = e.marker(ctx, p)
		if errors.Is(err, twicestore.ErrNotFound) {
			res.Existing, err = &twicetype.Marker{Handler: p.Handler, Key: p.Key}, nil
		}
		return err
	})
	return res, err
}

// claimMarker is the one claim both MarkerClaim and JobFinish use; exec runs
// claimSQL, directly or as a statement prepared for a batch.
func claimMarker(_ context.Context, exec func(args ...any) (sql.Result, error), p *twicestore.MarkerParams) (*twicestore.MarkerClaimResult, error) {
	_, err := exec(p.Handler, p.Key, micros(nowOr(p.Now)), nullID(p.JobID), nullID(p.Epoch))
	switch {
	case err == nil:
		return &twicestore.MarkerClaimResult{}, nil
	case isUniqueViolation(err):
		return &twicestore.MarkerClaimResult{AlreadyProcessed: true}, nil
	}
	return nil, fmt.Errorf("claim marker %q/%q: %w", p.Handler, p.Key, err)
}

// nullID stores a zero job id or epoch as NULL: no claimant recorded.
func nullID(v int64) sql.NullInt64 { return sql.NullInt64{Int64: v, Valid: v != 0} }

// isUniqueViolation reports whether err is SQLite refusing a duplicate. Both
// extended codes mean it: a PRIMARY KEY conflict is reported as
// SQLITE_CONSTRAINT_PRIMARYKEY (1555) and a UNIQUE constraint or index
// conflict as SQLITE_CONSTRAINT_UNIQUE (2067). Checking only one of them is
// the bug of catching SQL Server's 2627 but not its 2601.
func isUniqueViolation(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() {
	case sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, sqlite3.SQLITE_CONSTRAINT_UNIQUE:
		return true
	}
	return false
}

// MarkerRelease deletes handler's claim on key; releasing an unclaimed pair
// is not an error.
func (e *executor) MarkerRelease(ctx context.Context, p *twicestore.MarkerParams) error {
	err := e.write(ctx, func() error {
		_, err := e.db.ExecContext(ctx, `DELETE FROM twice_markers WHERE handler = ? AND key = ?`, p.Handler, p.Key)
		return err
	})
	if err != nil {
		return fmt.Errorf("release marker %q/%q: %w", p.Handler, p.Key, err)
	}
	return nil
}

// MarkerPrune deletes up to Limit markers processed before Before, oldest
// first; a Limit of zero or less deletes them all.
func (e *executor) MarkerPrune(ctx context.Context, p *twicestore.MarkerPruneParams) (*twicestore.MarkerPruneResult, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = -1
	}
	res := &twicestore.MarkerPruneResult{}
	err := e.write(ctx, func() (err error) {
		res.Deleted, res.From, err = pruneFrom(ctx, e.db, `DELETE FROM twice_markers WHERE rowid IN (
			SELECT rowid FROM twice_markers WHERE processed_at < ? AND processed_at >= ? ORDER BY processed_at LIMIT ?)
			RETURNING processed_at`, p.Before, p.From, limit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("prune markers: %w", err)
	}
	return res, nil
}

// pruneFrom runs a prune statement that goes on from a pass's cursor: it
// takes the cut-off, the cursor and the limit, and returns the time of
// each row it deleted. pruneFrom returns their count and the latest of
// them, the next batch's cursor (from itself when nothing was deleted).
func pruneFrom(ctx context.Context, q dbtx, query string, before, from time.Time, limit int) (int, time.Time, error) {
	rows, err := q.QueryContext(ctx, query, micros(before), micros(from), limit)
	if err != nil {
		return 0, time.Time{}, err
	}
	ats, err := dbrows.Collect(rows, dbrows.One[int64])
	if err != nil {
		return 0, time.Time{}, err
	}
	for _, at := range ats {
		if t := time.UnixMicro(at).UTC(); t.After(from) {
			from = t
		}
	}
	return len(ats), from, nil
}
