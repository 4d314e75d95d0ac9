package twicemysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// MarkerPeek reports whether handler has processed key.
func (e *executor) MarkerPeek(ctx context.Context, p *twicestore.MarkerParams) (*twicestore.MarkerPeekResult, error) {
	m, err := marker(ctx, e.db, p, "")
	return driverkit.PeekResult(p, m, mapError(err))
}

// marker reads one claim, or ErrNotFound. lock is appended to the SELECT:
// "" for a plain read, or lockShared.
func marker(ctx context.Context, q dbtx, p *twicestore.MarkerParams, lock string) (*twicetype.Marker, error) {
	m := &twicetype.Marker{Handler: p.Handler, Key: p.Key}
	var jobID, epoch sql.NullInt64
	err := q.QueryRowContext(ctx,
		"SELECT processed_at, job_id, epoch FROM twice_markers WHERE handler = ? AND `key` = ?"+lock, p.Handler, p.Key,
	).Scan(&m.ProcessedAt, &jobID, &epoch)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, twicestore.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	m.ProcessedAt, m.JobID, m.Epoch = m.ProcessedAt.UTC(), jobID.Int64, epoch.Int64
	return m, nil
}

// lockShared makes a SELECT a locking read that shares the rows it
// reads: it reads their latest committed version whatever the
// transaction's isolation, and keeps them from changing until the
// transaction ends. MySQL 8.0 also spells it FOR SHARE; MariaDB knows
// only this spelling.
const lockShared = " LOCK IN SHARE MODE"

// claimSQL is a plain INSERT on purpose: INSERT IGNORE would also turn a
// value the column refuses into a warning, while a classified duplicate
// key error says exactly "already processed" and nothing else. A failed
// statement leaves a MySQL transaction open and usable, so a claim refused
// in the caller's transaction (JobFinish's, a Transactional handler's)
// spoils nothing.
const claimSQL = "INSERT INTO twice_markers (handler, `key`, processed_at, job_id, epoch) VALUES (?, ?, ?, ?, ?)"

// MarkerClaim records that handler processed key at Now (the current time
// when zero). A pair already claimed reports AlreadyProcessed and the claim
// found.
//
// The primary key settles concurrent claims: an INSERT that meets a claim
// another transaction has not committed waits for it (at most
// innodb_lock_wait_timeout, then ErrLockTimeout), and fails with a
// duplicate key error once it commits.
func (e *executor) MarkerClaim(ctx context.Context, p *twicestore.MarkerParams) (*twicestore.MarkerClaimResult, error) {
	res, err := claimMarkerRetrying(ctx, e, p)
	if err != nil || !res.AlreadyProcessed {
		return res, err
	}
	// The duplicate key error left a shared lock on the claim found, so
	// this locking read returns it as committed (a release in between
	// reads as a claim without details).
	res.Existing, err = marker(ctx, e.db, p, lockShared)
	if errors.Is(err, twicestore.ErrNotFound) {
		res.Existing, err = &twicetype.Marker{Handler: p.Handler, Key: p.Key}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claim marker %q/%q: read the existing claim: %w", p.Handler, p.Key, mapError(err))
	}
	return res, nil
}

// claimMarkerRetrying runs claimMarker on e's database. Outside a
// transaction the INSERT commits alone, so when InnoDB picks it as a
// deadlock's victim (claims waiting on a claim that was rolled back can
// deadlock on their shared locks), nothing else was undone and the INSERT
// is run again.
func claimMarkerRetrying(ctx context.Context, e *executor, p *twicestore.MarkerParams) (*twicestore.MarkerClaimResult, error) {
	for attempt := 1; ; attempt++ {
		res, err := claimMarker(ctx, e.db, p)
		if e.pool == nil || attempt == deadlockRetries || !isDeadlock(err) {
			return res, mapError(err)
		}
	}
}

// claimMarker records, in q's transaction, that p.Handler processed
// p.Key, or reports AlreadyProcessed: JobFinish claims an outcome's
// markers with it. A duplicate key error leaves q's transaction usable.
func claimMarker(ctx context.Context, q dbtx, p *twicestore.MarkerParams) (*twicestore.MarkerClaimResult, error) {
	_, err := q.ExecContext(ctx, claimSQL, p.Handler, p.Key, dbTime(nowOr(p.Now)), nullID(p.JobID), nullID(p.Epoch))
	switch {
	case err == nil:
		return &twicestore.MarkerClaimResult{}, nil
	case isUniqueViolation(err):
		return &twicestore.MarkerClaimResult{AlreadyProcessed: true}, nil
	}
	return nil, fmt.Errorf("claim marker %q/%q: %w", p.Handler, p.Key, err)
}

// MarkerRelease deletes handler's claim on key; releasing an unclaimed pair
// is not an error.
func (e *executor) MarkerRelease(ctx context.Context, p *twicestore.MarkerParams) error {
	if _, err := e.db.ExecContext(ctx, "DELETE FROM twice_markers WHERE handler = ? AND `key` = ?", p.Handler, p.Key); err != nil {
		return fmt.Errorf("release marker %q/%q: %w", p.Handler, p.Key, mapError(err))
	}
	return nil
}

// MarkerPrune deletes up to Limit markers processed before Before, oldest
// first; a Limit of zero or less deletes them all.
func (e *executor) MarkerPrune(ctx context.Context, p *twicestore.MarkerPruneParams) (*twicestore.MarkerPruneResult, error) {
	n, from, err := e.pruneFrom(ctx, markerPrune, p.Before, p.From, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("prune markers: %w", err)
	}
	return &twicestore.MarkerPruneResult{Deleted: n, From: from}, nil
}

// prunable names a table pruneFrom deletes from: its primary key's columns
// (quoted) and the time column it prunes by.
type prunable struct {
	table string
	key   []string
	at    string
}

// The tables of markers, steps and idempotency records, as pruneFrom
// deletes from them.
var (
	markerPrune      = prunable{"twice_markers", []string{"handler", "`key`"}, "processed_at"}
	stepPrune        = prunable{"twice_steps", []string{"handler", "`key`", "step"}, "claimed_at"}
	idempotencyPrune = prunable{"twice_idempotency", []string{"principal", "`key`"}, "expires_at"}
)

// pruneBatchMax is how many rows one statement of pruneFrom deletes at
// most; a prune without a limit deletes batch after batch.
const pruneBatchMax = 1000

// pruneFrom deletes up to limit rows of t (all of them when limit is zero
// or less) whose time is before before and at or after from (the pass's
// cursor), the earliest first. It returns how many it deleted and the
// latest time among them, the next batch's cursor (from itself when it
// deleted nothing).
func (e *executor) pruneFrom(ctx context.Context, t prunable, before, from time.Time, limit int) (int, time.Time, error) {
	deleted := 0
	for {
		batch := pruneBatchMax
		if limit > 0 {
			batch = min(limit-deleted, pruneBatchMax)
		}
		var n int
		err := e.inTx(ctx, func(q dbtx) (err error) {
			n, from, err = pruneBatch(ctx, q, t, before, from, batch)
			return err
		})
		if err != nil {
			return deleted, from, err
		}
		deleted += n
		if n < batch || (limit > 0 && deleted >= limit) {
			return deleted, from, nil
		}
	}
}

// pruneBatch deletes, in q's transaction, up to limit rows of t as
// pruneFrom says. MySQL has no DELETE ... RETURNING, so it first locks the
// rows with SELECT ... FOR UPDATE, which reads their keys and times, then
// deletes them by key. SKIP LOCKED lets nodes prune at once without
// deleting the same rows or waiting for each other, nor for a transaction
// that holds one of them (a marker being claimed, a record being begun).
func pruneBatch(ctx context.Context, q dbtx, t prunable, before, from time.Time, limit int) (int, time.Time, error) {
	keys := strings.Join(t.key, ", ")
	// A pass's first batch has no cursor: the driver would send the zero
	// time as '0000-00-00', which no DATETIME column holds.
	cond, args := t.at+" < ?", []any{dbTime(before)}
	if !from.IsZero() {
		cond, args = cond+" AND "+t.at+" >= ?", append(args, dbTime(from))
	}
	rows, err := q.QueryContext(ctx, fmt.Sprintf(`SELECT %s, %s FROM %s WHERE %s ORDER BY %s LIMIT ? FOR UPDATE SKIP LOCKED`,
		keys, t.at, t.table, cond, t.at), append(args, limit)...)
	if err != nil {
		return 0, from, err
	}
	type found struct {
		key []any
		at  time.Time
	}
	rowsFound, err := dbrows.Collect(rows, func(r dbrows.Scanner) (found, error) {
		f := found{key: make([]any, len(t.key))}
		dest := make([]any, 0, len(t.key)+1)
		for i := range f.key {
			dest = append(dest, &f.key[i])
		}
		err := r.Scan(append(dest, &f.at)...)
		return f, err
	})
	if err != nil || len(rowsFound) == 0 {
		return 0, from, err
	}
	tuple := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(t.key)), ", ") + ")"
	tuples := make([]string, len(rowsFound))
	keyArgs := make([]any, 0, len(rowsFound)*len(t.key))
	for i, f := range rowsFound {
		tuples[i] = tuple
		keyArgs = append(keyArgs, f.key...)
		if at := f.at.UTC(); at.After(from) {
			from = at
		}
	}
	r, err := q.ExecContext(ctx, fmt.Sprintf(`DELETE FROM %s WHERE (%s) IN (%s)`,
		t.table, keys, strings.Join(tuples, ", ")), keyArgs...)
	if err != nil {
		return 0, from, err
	}
	n, err := r.RowsAffected()
	return int(n), from, err
}
