package twicepg

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// idempotencyColumns are the columns scanIdempotency reads, in its order.
const idempotencyColumns = `principal, key, fingerprint, done, status, header::text, body,
	locked_at, created_at, expires_at`

// IdempotencyBegin takes the key, or returns its record, in one
// transaction: the executor's own when it runs in one, otherwise one begun
// for the call.
//
// An expired record is deleted first. The insert then takes the key unless
// a record holds it; an insert that meets a row another transaction is
// inserting waits for that transaction, so of concurrent Begins exactly one
// inserts. The others lock the row they met with SELECT ... FOR UPDATE and,
// when it is running with a lock older than StaleAfter, take it over; the
// row lock makes concurrent take-overs wait, and the ones that wait then
// read the fresh lock and leave it. Only the same request (fingerprint)
// takes a stale lock over. A row deleted between the insert and
// the select (released, or pruned) sends the Begin back to the insert.
func (e *executor) IdempotencyBegin(ctx context.Context, p *twicestore.IdempotencyBeginParams) (*twicestore.IdempotencyBeginResult, error) {
	now := nowOr(p.Now)
	res := &twicestore.IdempotencyBeginResult{}
	err := e.inTx(ctx, func(tx *executor) error {
		if _, err := tx.q.exec(ctx, `DELETE FROM twice_idempotency
			WHERE principal = $1 AND key = $2 AND expires_at < $3`, p.Principal, p.Key, now); err != nil {
			return err
		}
		for range 10 {
			rec, err := scanIdempotency(tx.q.queryRow(ctx, `INSERT INTO twice_idempotency
				(principal, key, fingerprint, locked_at, created_at, expires_at) VALUES ($1, $2, $3, $4, $4, $5)
				ON CONFLICT (principal, key) DO NOTHING
				RETURNING `+idempotencyColumns, p.Principal, p.Key, p.Fingerprint, now, p.ExpiresAt))
			if err == nil {
				res.Taken, res.Record = true, rec
				return nil
			}
			if !isNoRows(err) {
				return err
			}
			rec, err = scanIdempotency(tx.q.queryRow(ctx, `SELECT `+idempotencyColumns+`
				FROM twice_idempotency WHERE principal = $1 AND key = $2 FOR UPDATE`, p.Principal, p.Key))
			if isNoRows(err) {
				continue
			}
			if err != nil {
				return err
			}
			res.Record = rec
			// A different request never takes the key over: its first
			// request may have had effects, and its client may retry it.
			if rec.Done || rec.Fingerprint != p.Fingerprint || !rec.LockedAt.Before(now.Add(-p.StaleAfter)) {
				return nil
			}
			rec, err = scanIdempotency(tx.q.queryRow(ctx, `UPDATE twice_idempotency
				SET locked_at = $3, expires_at = $4
				WHERE principal = $1 AND key = $2 AND NOT done AND locked_at = $5
				RETURNING `+idempotencyColumns, p.Principal, p.Key, now, p.ExpiresAt, rec.LockedAt))
			if isNoRows(err) {
				return nil // cannot happen under the row lock; the record read stands
			}
			if err != nil {
				return err
			}
			res.Taken, res.Record = true, rec
			return nil
		}
		return fmt.Errorf("the record was deleted under each of 10 attempts")
	})
	if err != nil {
		return nil, fmt.Errorf("begin idempotency key %q: %w", p.Key, err)
	}
	return res, nil
}

// scanIdempotency scans the idempotencyColumns of one record, times in UTC.
func scanIdempotency(r row) (twicetype.IdempotencyRecord, error) {
	var rec twicetype.IdempotencyRecord
	err := driverkit.ScanIdempotency(driverkit.NativeTimes, r, &rec, &rec.Principal, &rec.Key)
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
	// PostgreSQL keeps microseconds and rounds to them; truncating here
	// keeps the new lock after the old one.
	lock := nowOr(p.Now).Truncate(time.Microsecond)
	if old := p.LockedAt.Truncate(time.Microsecond); !lock.After(old) {
		lock = old.Add(time.Microsecond)
	}
	var locked time.Time
	err := e.q.queryRow(ctx, `UPDATE twice_idempotency SET locked_at = $3
		WHERE principal = $1 AND key = $2 AND NOT done AND locked_at = $4
		RETURNING locked_at`, p.Principal, p.Key, lock, p.LockedAt).Scan(&locked)
	if isNoRows(err) {
		err = twicestore.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("extend idempotency key %q: %w", p.Key, err)
	}
	return &twicestore.IdempotencyExtendResult{LockedAt: locked.UTC()}, nil
}

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
	n, err := e.q.exec(ctx, `UPDATE twice_idempotency SET done = true, status = $3, header = $4::text::jsonb, body = $5
		WHERE principal = $1 AND key = $2 AND ($6::timestamptz IS NULL OR (NOT done AND locked_at = $6))`,
		p.Principal, p.Key, p.Status, string(header), body, lockArg(p.LockedAt))
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
	if _, err := e.q.exec(ctx, `DELETE FROM twice_idempotency
		WHERE principal = $1 AND key = $2 AND ($3::timestamptz IS NULL OR (NOT done AND locked_at = $3))`,
		p.Principal, p.Key, lockArg(p.LockedAt)); err != nil {
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
	n, from, err := e.pruneFrom(ctx, idempotencyPruneSQL, p.Before, p.Limit, p.From)
	if err != nil {
		return nil, fmt.Errorf("prune idempotency keys: %w", err)
	}
	return &twicestore.IdempotencyPruneResult{Deleted: n, From: from}, nil
}

// lockArg is a lock guard's argument: the lock's time, or NULL for no
// guard.
func lockArg(lockedAt time.Time) any {
	if lockedAt.IsZero() {
		return nil
	}
	return lockedAt
}
