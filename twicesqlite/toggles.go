package twicesqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// nullMicros stores an optional time; the zero time is NULL.
func nullMicros(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: micros(t), Valid: true}
}

// ToggleSet stores the kill switch of the toggle's kind, replacing every
// field of the one already stored for it, and appends the change to the
// history in the same transaction. A zero At is the current time. The
// previous state is judged at At: a stored switch that had expired by then
// was none.
func (e *executor) ToggleSet(ctx context.Context, p *twicestore.ToggleSetParams) error {
	tg := p.Toggle
	kind := driverkit.ToggleKey(tg.Kind)
	at := nowOr(tg.At)
	err := e.inTx(ctx, func(q dbtx) error {
		prev, err := storedToggleState(ctx, q, kind, at)
		if err != nil {
			return err
		}
		if _, err := q.ExecContext(ctx, `INSERT INTO twice_toggles (kind, enabled, reason, set_by, set_at, expires_at)
		VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (kind) DO UPDATE SET enabled = excluded.enabled, reason = excluded.reason,
			set_by = excluded.set_by, set_at = excluded.set_at, expires_at = excluded.expires_at`,
			kind, tg.Enabled, tg.Reason, tg.By, micros(at), nullMicros(tg.ExpiresAt)); err != nil {
			return err
		}
		next := twicetype.ToggleOff
		if tg.Enabled {
			next = twicetype.ToggleOn
		}
		return appendToggleChange(ctx, q, &twicetype.ToggleChange{Kind: kind, By: tg.By, Reason: tg.Reason,
			Previous: prev, New: next, Source: driverkit.ToggleSource(p.Source), ExpiresAt: tg.ExpiresAt, At: at})
	})
	if err != nil {
		return fmt.Errorf("set toggle %q: %w", kind, err)
	}
	return nil
}

// ToggleDelete removes the kill switch of the kind and appends the change
// to the history in the same transaction; removing one that is not stored
// is not an error, and is recorded as none to none.
func (e *executor) ToggleDelete(ctx context.Context, p *twicestore.ToggleDeleteParams) error {
	kind := driverkit.ToggleKey(p.Kind)
	at := nowOr(p.At)
	err := e.inTx(ctx, func(q dbtx) error {
		prev, err := storedToggleState(ctx, q, kind, at)
		if err != nil {
			return err
		}
		if _, err := q.ExecContext(ctx, `DELETE FROM twice_toggles WHERE kind = ?`, kind); err != nil {
			return err
		}
		return appendToggleChange(ctx, q, &twicetype.ToggleChange{Kind: kind, By: p.By, Reason: p.Reason,
			Previous: prev, New: twicetype.ToggleNone, Source: driverkit.ToggleSource(p.Source), At: at})
	})
	if err != nil {
		return fmt.Errorf("delete toggle %q: %w", kind, err)
	}
	return nil
}

// storedToggleState reads the kind's stored switch as the history records
// it, at now. The caller's transaction holds SQLite's write lock, so no
// other writer changes the switch between this read and the write after.
func storedToggleState(ctx context.Context, q dbtx, kind string, now time.Time) (twicetype.ToggleState, error) {
	var (
		tg      twicetype.Toggle
		expires sql.NullInt64
	)
	err := q.QueryRowContext(ctx, `SELECT enabled, expires_at FROM twice_toggles WHERE kind = ?`, kind).
		Scan(&tg.Enabled, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return twicetype.ToggleNone, nil
	}
	if err != nil {
		return "", fmt.Errorf("read the stored switch: %w", err)
	}
	tg.ExpiresAt = driverkit.FromNullMicros(expires)
	return tg.StateOf(now), nil
}

func appendToggleChange(ctx context.Context, q dbtx, c *twicetype.ToggleChange) error {
	if _, err := q.ExecContext(ctx, `INSERT INTO twice_toggle_history
		(kind, set_by, reason, previous_state, new_state, source, expires_at, changed_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		c.Kind, c.By, c.Reason, c.Previous, c.New, c.Source, nullMicros(c.ExpiresAt), micros(c.At)); err != nil {
		return fmt.Errorf("record the change in the switch history: %w", err)
	}
	return nil
}

// ToggleList lists the stored kill switches that have not expired at Now,
// ordered by kind, byte by byte (the column's BINARY collation).
func (e *executor) ToggleList(ctx context.Context, p *twicestore.ToggleListParams) (*twicestore.ToggleListResult, error) {
	rows, err := e.db.QueryContext(ctx, `SELECT kind, enabled, reason, set_by, set_at, expires_at FROM twice_toggles
		WHERE expires_at IS NULL OR expires_at > ? ORDER BY kind`, micros(nowOr(p.Now)))
	if err != nil {
		return nil, fmt.Errorf("list toggles: %w", err)
	}
	toggles, err := driverkit.CollectList(rows, driverkit.ToggleRow(driverkit.MicrosTimes))
	if err != nil {
		return nil, fmt.Errorf("list toggles: %w", err)
	}
	return &twicestore.ToggleListResult{Toggles: toggles}, nil
}

// ToggleHistory lists the switch history, newest first: a kind's, or every
// kind's when Kind is empty.
func (e *executor) ToggleHistory(ctx context.Context, p *twicestore.ToggleHistoryParams) (*twicestore.ToggleHistoryResult, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = -1 // no limit in SQLite
	}
	before := p.BeforeID
	if before <= 0 {
		before = 1<<63 - 1
	}
	kind := driverkit.ToggleKey(p.Kind)
	rows, err := e.db.QueryContext(ctx, `SELECT id, kind, set_by, reason, previous_state, new_state, source,
		expires_at, changed_at FROM twice_toggle_history
		WHERE (? = '' OR kind = ?) AND id < ? ORDER BY id DESC LIMIT ?`, kind, kind, before, limit)
	if err != nil {
		return nil, fmt.Errorf("list switch history: %w", err)
	}
	changes, err := driverkit.CollectList(rows, driverkit.ToggleChangeRow(driverkit.MicrosTimes))
	if err != nil {
		return nil, fmt.Errorf("list switch history: %w", err)
	}
	return &twicestore.ToggleHistoryResult{Changes: changes}, nil
}
