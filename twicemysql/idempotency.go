package twicemysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// idempotencyColumns are the columns idempotencyGet reads, in its order.
const idempotencyColumns = "fingerprint, done, status, header, body, locked_at, created_at, expires_at"

// IdempotencyBegin takes the key, or returns its record, in one
// transaction: the executor's own when it runs in one, otherwise one begun
// for the call.
//
// A record that exists is read with SELECT ... FOR UPDATE, and decided on
// under its exclusive lock, so concurrent Begins of a stored key run one
// after the other: an expired record is replaced by a fresh one (as if
// deleted first); a running record of the same request (fingerprint)
// whose lock is older than StaleAfter is taken over; any other is
// returned as it is.
//
// A key not stored is inserted (at READ COMMITTED the locking read of a
// missing row locks nothing). Of concurrent inserts the primary key lets
// one through; the others wait for it to commit and fail with a duplicate
// key error, which leaves them a shared lock on the new record. A
// locking read under that lock returns it, and the Begin returns it
// untaken, as it usually must be (its lock was just taken). Only when it
// must be taken over or replaced does the Begin go back to the exclusive
// read, whose wait for other holders of shared locks InnoDB may break as
// a deadlock; inTx then runs the Begin again, and finds the record. This
// decides from statements that succeed or fail, never from a count of
// rows, which a connection with clientFoundRows counts differently.
func (e *executor) IdempotencyBegin(ctx context.Context, p *twicestore.IdempotencyBeginParams) (*twicestore.IdempotencyBeginResult, error) {
	now, expires := dbTime(nowOr(p.Now)), dbTime(p.ExpiresAt)
	fresh := twicetype.IdempotencyRecord{
		Principal: p.Principal, Key: p.Key, Fingerprint: p.Fingerprint,
		LockedAt: now, CreatedAt: now, ExpiresAt: expires,
	}
	// takes reports whether this Begin takes the key of rec: expired, or
	// a stale lock of the same request. A different request never takes
	// the key over: its first request may have had effects, and its
	// client may retry it.
	takes := func(rec twicetype.IdempotencyRecord) bool {
		return rec.ExpiresAt.Before(now) ||
			!rec.Done && rec.Fingerprint == p.Fingerprint && rec.LockedAt.Before(now.Add(-p.StaleAfter))
	}
	res := &twicestore.IdempotencyBeginResult{}
	err := e.inTx(ctx, func(q dbtx) error {
		*res = twicestore.IdempotencyBeginResult{} // inTx may run this again
		for range 10 {
			rec, err := idempotencyGet(ctx, q, p.Principal, p.Key, " FOR UPDATE")
			switch {
			case err == nil:
				res.Taken, res.Record, err = takeIdempotency(ctx, q, rec, fresh, takes(rec))
				return err
			case !errors.Is(err, twicestore.ErrNotFound):
				return err
			}
			_, err = q.ExecContext(ctx, "INSERT INTO twice_idempotency (principal, `key`, fingerprint, locked_at, created_at, expires_at)"+
				" VALUES (?, ?, ?, ?, ?, ?)", p.Principal, p.Key, p.Fingerprint, now, now, expires)
			if err == nil {
				res.Taken, res.Record = true, fresh
				return nil
			}
			if !isUniqueViolation(err) {
				return err
			}
			rec, err = idempotencyGet(ctx, q, p.Principal, p.Key, lockShared)
			switch {
			case errors.Is(err, twicestore.ErrNotFound): // deleted again (released, pruned): insert again
			case err != nil:
				return err
			case !takes(rec):
				res.Record = rec
				return nil
			}
		}
		return errors.New("the record changed under each of 10 attempts")
	})
	if err != nil {
		return nil, fmt.Errorf("begin idempotency key %q: %w", p.Key, err)
	}
	return res, nil
}

// takeIdempotency returns rec, untaken, or when take is set takes its key
// under the exclusive lock the caller holds: an expired record is
// replaced by fresh, a stale one gets fresh's lock and expiry.
func takeIdempotency(ctx context.Context, q dbtx, rec, fresh twicetype.IdempotencyRecord, take bool) (bool, twicetype.IdempotencyRecord, error) {
	switch {
	case !take:
		return false, rec, nil
	case rec.ExpiresAt.Before(fresh.LockedAt):
		_, err := q.ExecContext(ctx, "UPDATE twice_idempotency SET fingerprint = ?, done = 0, status = 0,"+
			" header = '{}', body = '', locked_at = ?, created_at = ?, expires_at = ? WHERE principal = ? AND `key` = ?",
			fresh.Fingerprint, fresh.LockedAt, fresh.CreatedAt, fresh.ExpiresAt, rec.Principal, rec.Key)
		return err == nil, fresh, err
	}
	_, err := q.ExecContext(ctx, "UPDATE twice_idempotency SET locked_at = ?, expires_at = ? WHERE principal = ? AND `key` = ?",
		fresh.LockedAt, fresh.ExpiresAt, rec.Principal, rec.Key)
	rec.LockedAt, rec.ExpiresAt = fresh.LockedAt, fresh.ExpiresAt
	return err == nil, rec, err
}

// idempotencyGet reads one record in q, or returns ErrNotFound; lock is
// appended to the SELECT.
func idempotencyGet(ctx context.Context, q dbtx, principal, key, lock string) (twicetype.IdempotencyRecord, error) {
	rec := twicetype.IdempotencyRecord{Principal: principal, Key: key}
	err := driverkit.ScanIdempotency(driverkit.NativeTimes, q.QueryRowContext(ctx,
		"SELECT "+idempotencyColumns+" FROM twice_idempotency WHERE principal = ? AND `key` = ?"+lock, principal, key), &rec)
	if errors.Is(err, sql.ErrNoRows) {
		return rec, twicestore.ErrNotFound
	}
	return rec, err
}

// IdempotencyExtend moves a running record's lock to Now (at least a
// microsecond past the caller's lock, so the holder's identity changes),
// guarded by the caller's lock; an error wrapping twicestore.ErrNotFound
// says the caller no longer holds the key. The lock always moves, so the
// count of rows is the same whether the connection counts rows changed or
// found.
func (e *executor) IdempotencyExtend(ctx context.Context, p *twicestore.IdempotencyExtendParams) (*twicestore.IdempotencyExtendResult, error) {
	if p.LockedAt.IsZero() {
		return nil, fmt.Errorf("extend idempotency key %q: LockedAt is required: pass the lock Begin returned", p.Key)
	}
	lock, old := dbTime(nowOr(p.Now)), dbTime(p.LockedAt)
	if !lock.After(old) {
		lock = old.Add(time.Microsecond)
	}
	r, err := e.db.ExecContext(ctx, "UPDATE twice_idempotency SET locked_at = ?"+
		" WHERE principal = ? AND `key` = ? AND done = 0 AND locked_at = ?", lock, p.Principal, p.Key, old)
	var n int64
	if err == nil {
		n, err = r.RowsAffected()
	}
	if err == nil && n == 0 {
		err = twicestore.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("extend idempotency key %q: %w", p.Key, mapError(err))
	}
	return &twicestore.IdempotencyExtendResult{LockedAt: lock}, nil
}

// lockGuardSQL holds when the caller passed no lock (NULL), or when the
// record is running under the lock it passed (bound twice).
const lockGuardSQL = "(? IS NULL OR (done = 0 AND locked_at = ?))"

// IdempotencyComplete stores the response of the request that took the
// key, or returns an error wrapping twicestore.ErrNotFound when there is no
// record to store it in.
func (e *executor) IdempotencyComplete(ctx context.Context, p *twicestore.IdempotencyCompleteParams) error {
	header := []byte("{}")
	if p.Header != nil {
		var err error
		if header, err = json.Marshal(p.Header); err != nil {
			return fmt.Errorf("complete idempotency key %q: encode header: %w", p.Key, err)
		}
	}
	body := p.Body
	if body == nil {
		body = []byte{} // nil would be sent as NULL
	}
	lock := nullTime(p.LockedAt)
	r, err := e.db.ExecContext(ctx, "UPDATE twice_idempotency SET done = 1, status = ?, header = ?, body = ?"+
		" WHERE principal = ? AND `key` = ? AND "+lockGuardSQL,
		p.Status, string(header), body, p.Principal, p.Key, lock, lock)
	var n int64
	if err == nil {
		n, err = r.RowsAffected()
	}
	if err == nil && n == 0 {
		// MySQL counts the rows changed: without a lock guard, a record
		// completed before with the same response was found but not
		// changed (with a guard, done always changes). Only a record not
		// found is an error.
		var one int
		err = e.db.QueryRowContext(ctx, "SELECT 1 FROM twice_idempotency WHERE principal = ? AND `key` = ? AND ? IS NULL",
			p.Principal, p.Key, lock).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			err = twicestore.ErrNotFound
		}
	}
	if err != nil {
		return fmt.Errorf("complete idempotency key %q: %w", p.Key, mapError(err))
	}
	return nil
}

// IdempotencyRelease deletes the record; deleting one that is not stored is
// not an error.
func (e *executor) IdempotencyRelease(ctx context.Context, p *twicestore.IdempotencyKeyParams) error {
	lock := nullTime(p.LockedAt)
	if _, err := e.db.ExecContext(ctx, "DELETE FROM twice_idempotency WHERE principal = ? AND `key` = ? AND "+lockGuardSQL,
		p.Principal, p.Key, lock, lock); err != nil {
		return fmt.Errorf("release idempotency key %q: %w", p.Key, mapError(err))
	}
	return nil
}

// IdempotencyPrune deletes up to Limit records that expired before Before,
// the earliest first; a Limit of zero or less deletes nothing.
func (e *executor) IdempotencyPrune(ctx context.Context, p *twicestore.IdempotencyPruneParams) (*twicestore.IdempotencyPruneResult, error) {
	if p.Limit <= 0 {
		return &twicestore.IdempotencyPruneResult{}, nil
	}
	n, from, err := e.pruneFrom(ctx, idempotencyPrune, p.Before, p.From, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("prune idempotency keys: %w", err)
	}
	return &twicestore.IdempotencyPruneResult{Deleted: n, From: from}, nil
}
