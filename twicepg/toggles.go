package twicepg

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// nullTime stores an optional time; the zero time is NULL.
func nullTime(t time.Time) sql.NullTime {
	return sql.NullTime{Time: t, Valid: !t.IsZero()}
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
	err := e.inTx(ctx, func(tx *executor) error {
		prev, err := tx.lockToggle(ctx, kind, at)
		if err != nil {
			return err
		}
		// The notification goes out when the write commits, and wakes every
		// worker's ListenToggles at once.
		if _, err := tx.q.exec(ctx, `WITH set AS (
				INSERT INTO twice_toggles (kind, enabled, reason, set_by, set_at, expires_at)
				VALUES ($1, $2, $3, $4, $5, $6)
				ON CONFLICT (kind) DO UPDATE SET enabled = excluded.enabled, reason = excluded.reason,
					set_by = excluded.set_by, set_at = excluded.set_at, expires_at = excluded.expires_at
				RETURNING kind)
			SELECT pg_notify($7, kind) FROM set`,
			kind, tg.Enabled, tg.Reason, tg.By, at, nullTime(tg.ExpiresAt), e.notify.toggleChannel); err != nil {
			return err
		}
		next := twicetype.ToggleOff
		if tg.Enabled {
			next = twicetype.ToggleOn
		}
		return tx.appendToggleChange(ctx, &twicetype.ToggleChange{Kind: kind, By: tg.By, Reason: tg.Reason,
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
	err := e.inTx(ctx, func(tx *executor) error {
		prev, err := tx.lockToggle(ctx, kind, at)
		if err != nil {
			return err
		}
		if _, err := tx.q.exec(ctx, `WITH gone AS (DELETE FROM twice_toggles WHERE kind = $1 RETURNING kind)
			SELECT pg_notify($2, kind) FROM gone`, kind, e.notify.toggleChannel); err != nil {
			return err
		}
		return tx.appendToggleChange(ctx, &twicetype.ToggleChange{Kind: kind, By: p.By, Reason: p.Reason,
			Previous: prev, New: twicetype.ToggleNone, Source: driverkit.ToggleSource(p.Source), At: at})
	})
	if err != nil {
		return fmt.Errorf("delete toggle %q: %w", kind, err)
	}
	return nil
}

// lockToggle serialises the changes of one kind's switch until the
// transaction ends, then reads the stored switch as the history records
// it, at now. A row lock alone would not do: when no switch is stored
// there is no row to lock, and two concurrent first sets would both record
// none as the previous state. The advisory lock is keyed by the kind (a
// hash collision only makes two kinds wait for each other).
func (e *executor) lockToggle(ctx context.Context, kind string, now time.Time) (twicetype.ToggleState, error) {
	if _, err := e.q.exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('twice.toggle:' || $1, 0))`,
		kind); err != nil {
		return "", fmt.Errorf("lock the switch: %w", err)
	}
	var (
		tg      twicetype.Toggle
		expires sql.NullTime
	)
	err := e.q.queryRow(ctx, `SELECT enabled, expires_at FROM twice_toggles WHERE kind = $1`, kind).
		Scan(&tg.Enabled, &expires)
	if isNoRows(err) {
		return twicetype.ToggleNone, nil
	}
	if err != nil {
		return "", fmt.Errorf("read the stored switch: %w", err)
	}
	tg.ExpiresAt = driverkit.FromNullTime(expires)
	return tg.StateOf(now), nil
}

func (e *executor) appendToggleChange(ctx context.Context, c *twicetype.ToggleChange) error {
	if _, err := e.q.exec(ctx, `INSERT INTO twice_toggle_history
		(kind, set_by, reason, previous_state, new_state, source, expires_at, changed_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		c.Kind, c.By, c.Reason, string(c.Previous), string(c.New), c.Source, nullTime(c.ExpiresAt), c.At); err != nil {
		return fmt.Errorf("record the change in the switch history: %w", err)
	}
	return nil
}

// ToggleList lists the stored kill switches that have not expired at Now,
// ordered by kind. COLLATE "C" orders by bytes, as SQLite does, rather
// than by the database's locale, which may ignore punctuation such as the
// dash in "a-c" (glibc's en_US does).
func (e *executor) ToggleList(ctx context.Context, p *twicestore.ToggleListParams) (*twicestore.ToggleListResult, error) {
	rs, err := e.q.query(ctx, `SELECT kind, enabled, reason, set_by, set_at, expires_at FROM twice_toggles
		WHERE expires_at IS NULL OR expires_at > $1 ORDER BY kind COLLATE "C"`, nowOr(p.Now))
	if err != nil {
		return nil, fmt.Errorf("list toggles: %w", err)
	}
	toggles, err := driverkit.CollectList(rs, driverkit.ToggleRow(driverkit.NativeTimes))
	if err != nil {
		return nil, fmt.Errorf("list toggles: %w", err)
	}
	return &twicestore.ToggleListResult{Toggles: toggles}, nil
}

// ToggleHistory lists the switch history, newest first: a kind's, or every
// kind's when Kind is empty.
func (e *executor) ToggleHistory(ctx context.Context, p *twicestore.ToggleHistoryParams) (*twicestore.ToggleHistoryResult, error) {
	var before any
	if p.BeforeID > 0 {
		before = p.BeforeID
	}
	rs, err := e.q.query(ctx, `SELECT id, kind, set_by, reason, previous_state, new_state, source,
		expires_at, changed_at FROM twice_toggle_history
		WHERE ($1::text = '' OR kind = $1) AND ($2::bigint IS NULL OR id < $2)
		ORDER BY id DESC LIMIT $3`, driverkit.ToggleKey(p.Kind), before, limitArg(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list switch history: %w", err)
	}
	changes, err := driverkit.CollectList(rs, driverkit.ToggleChangeRow(driverkit.NativeTimes))
	if err != nil {
		return nil, fmt.Errorf("list switch history: %w", err)
	}
	return &twicestore.ToggleHistoryResult{Changes: changes}, nil
}
