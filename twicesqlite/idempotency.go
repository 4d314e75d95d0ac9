package twicesqlite

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

// IdempotencyBegin takes the key, or returns its record, in one
// transaction (the caller's, when the executor runs in one). SQLite has one
// writer at a time, and the transaction holds the write lock from its
// first write, so concurrent Begins run one after the other and only the
// first takes a key.
//
// An expired record is deleted first; the insert then takes the key unless
// a record holds it. A running record of the same request (fingerprint)
// whose lock is older than StaleAfter is taken over, by an update guarded
// by the locked_at read.
func (e *executor) IdempotencyBegin(ctx context.Context, p *twicestore.IdempotencyBeginParams) (*twicestore.IdempotencyBeginResult, error) {
	now := nowOr(p.Now)
	res := &twicestore.IdempotencyBeginResult{}
	err := e.inTx(ctx, func(q dbtx) error {
		if _, err := q.ExecContext(ctx, `DELETE FROM twice_idempotency
			WHERE principal = ? AND key = ? AND expires_at < ?`, p.Principal, p.Key, micros(now)); err != nil {
			return err
		}
		r, err := q.ExecContext(ctx, `INSERT INTO twice_idempotency
			(principal, key, fingerprint, locked_at, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (principal, key) DO NOTHING`,
			p.Principal, p.Key, p.Fingerprint, micros(now), micros(now), micros(p.ExpiresAt))
		if err != nil {
			return err
		}
		if n, err := r.RowsAffected(); err != nil || n == 1 {
			res.Taken = n == 1
			res.Record = twicetype.IdempotencyRecord{
				Principal: p.Principal, Key: p.Key, Fingerprint: p.Fingerprint,
				LockedAt: fromTime(now), CreatedAt: fromTime(now), ExpiresAt: fromTime(p.ExpiresAt),
			}
			return err
		}
		rec, err := idempotencyGet(ctx, q, p.Principal, p.Key)
		if err != nil {
			return err
		}
		res.Record = rec
		// A different request never takes the key over: its first
		// request may have had effects, and its client may retry it.
		if rec.Done || rec.Fingerprint != p.Fingerprint || !rec.LockedAt.Before(now.Add(-p.StaleAfter)) {
			return nil
		}
		r, err = q.ExecContext(ctx, `UPDATE twice_idempotency SET locked_at = ?, expires_at = ?
			WHERE principal = ? AND key = ? AND done = 0 AND locked_at = ?`,
			micros(now), micros(p.ExpiresAt), p.Principal, p.Key, micros(rec.LockedAt))
		if err != nil {
			return err
		}
		n, err := r.RowsAffected()
		if err != nil || n == 0 {
			return err
		}
		res.Taken = true
		res.Record.LockedAt, res.Record.ExpiresAt = fromTime(now), fromTime(p.ExpiresAt)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("begin idempotency key %q: %w", p.Key, err)
	}
	return res, nil
}

// idempotencyGet reads one record.
func idempotencyGet(ctx context.Context, q dbtx, principal, key string) (twicetype.IdempotencyRecord, error) {
	rec := twicetype.IdempotencyRecord{Principal: principal, Key: key}
	err := driverkit.ScanIdempotency(driverkit.MicrosTimes, q.QueryRowContext(ctx, `SELECT fingerprint, done, status, header, body, locked_at, created_at, expires_at
		FROM twice_idempotency WHERE principal = ? AND key = ?`, principal, key), &rec)
	if errors.Is(err, sql.ErrNoRows) {
		return rec, twicestore.ErrNotFound
	}
	return rec, err
}

// IdempotencyExtend moves a running record's lock to Now (at least a
// microsecond past the caller's lock, so the holder's identity changes),
// guarded by the caller's lock; an error wrapping twicestore.ErrNotFound
// says the caller no longer holds the key.
func (e *executor) IdempotencyExtend(ctx context.Context, p *twicestore.IdempotencyExtendParams) (*twicestore.IdempotencyExtendResult, error) {
	if p.LockedAt.IsZero() {
		return nil, fmt.Errorf("extend idempotency key %q: LockedAt is required: pass the lock Begin returned", p.Key)
	}
	lock := micros(nowOr(p.Now))
	if old := micros(p.LockedAt); lock <= old {
		lock = old + 1
	}
	var n int64
	err := e.write(ctx, func() error {
		r, err := e.db.ExecContext(ctx, `UPDATE twice_idempotency SET locked_at = ?
			WHERE principal = ? AND key = ? AND done = 0 AND locked_at = ?`,
			lock, p.Principal, p.Key, micros(p.LockedAt))
		if err != nil {
			return err
		}
		n, err = r.RowsAffected()
		return err
	})
	if err == nil && n == 0 {
		err = twicestore.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("extend idempotency key %q: %w", p.Key, err)
	}
	return &twicestore.IdempotencyExtendResult{LockedAt: time.UnixMicro(lock).UTC()}, nil
}

// IdempotencyComplete stores the response of the request that took the
// key, or returns an error wrapping twicestore.ErrNotFound when there is no
// record to store it in.
func (e *executor) IdempotencyComplete(ctx context.Context, p *twicestore.IdempotencyCompleteParams) error {
	header, err := json.Marshal(p.Header)
	if err != nil {
		return fmt.Errorf("complete idempotency key %q: encode header: %w", p.Key, err)
	}
	if p.Header == nil {
		header = []byte("{}")
	}
	body := p.Body
	if body == nil {
		body = []byte{} // nil would be stored as NULL
	}
	var n int64
	err = e.write(ctx, func() error {
		r, err := e.db.ExecContext(ctx, `UPDATE twice_idempotency SET done = 1, status = ?, header = ?, body = ?
			WHERE principal = ? AND key = ? AND (? = 0 OR (done = 0 AND locked_at = ?))`,
			p.Status, string(header), body, p.Principal, p.Key, lockArg(p.LockedAt), lockArg(p.LockedAt))
		if err != nil {
			return err
		}
		n, err = r.RowsAffected()
		return err
	})
	if err == nil && n == 0 {
		err = twicestore.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("complete idempotency key %q: %w", p.Key, err)
	}
	return nil
}

// IdempotencyRelease deletes the record; deleting one that is not stored is
// not an error.
func (e *executor) IdempotencyRelease(ctx context.Context, p *twicestore.IdempotencyKeyParams) error {
	err := e.write(ctx, func() error {
		_, err := e.db.ExecContext(ctx, `DELETE FROM twice_idempotency
			WHERE principal = ? AND key = ? AND (? = 0 OR (done = 0 AND locked_at = ?))`,
			p.Principal, p.Key, lockArg(p.LockedAt), lockArg(p.LockedAt))
		return err
	})
	if err != nil {
		return fmt.Errorf("release idempotency key %q: %w", p.Key, err)
	}
	return nil
}

// IdempotencyPrune deletes up to Limit records that expired before Before,
// the earliest first; a Limit of zero or less deletes nothing.
func (e *executor) IdempotencyPrune(ctx context.Context, p *twicestore.IdempotencyPruneParams) (*twicestore.IdempotencyPruneResult, error) {
	if p.Limit <= 0 {
		return &twicestore.IdempotencyPruneResult{}, nil
	}
	res := &twicestore.IdempotencyPruneResult{}
	err := e.write(ctx, func() (err error) {
		res.Deleted, res.From, err = pruneFrom(ctx, e.db, `DELETE FROM twice_idempotency WHERE rowid IN (
			SELECT rowid FROM twice_idempotency WHERE expires_at < ? AND expires_at >= ? ORDER BY expires_at LIMIT ?)
			RETURNING expires_at`, p.Before, p.From, p.Limit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("prune idempotency keys: %w", err)
	}
	return res, nil
}

// fromTime is t as it reads back from the database: at microsecond
// precision, in UTC.
func fromTime(t time.Time) time.Time { return time.UnixMicro(micros(t)).UTC() }

// lockArg is a lock guard's argument: the lock's time, or 0 for no guard.
func lockArg(lockedAt time.Time) int64 {
	if lockedAt.IsZero() {
		return 0
	}
	return micros(lockedAt)
}
