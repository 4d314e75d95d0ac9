package twicemysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// lockOrInsertTries bounds lockOrInsert's rounds: each one that fails met a
// row another transaction inserted and then deleted again in between.
const lockOrInsertTries = 10

// lockOrInsert makes the transaction the only writer of one row, which
// may not exist yet. lock reads the row with SELECT ... FOR UPDATE and
// reports whether it found it; when it did not, insert writes it.
//
// At READ COMMITTED InnoDB locks no gaps, so a FOR UPDATE that finds no row
// locks nothing, and two transactions could both find none. The insert is
// what orders them: the second one's insert waits for the first's new row,
// and fails with a duplicate key once the first commits; the row is then
// there to lock, and lock runs again. The failed insert leaves this
// transaction a shared lock on the row, so two such losers may deadlock
// upgrading it: InnoDB rolls one back, and inTx runs it again.
//
// found reports whether lock found the row (false: insert wrote it).
func lockOrInsert(lock func() (bool, error), insert func() error) (found bool, err error) {
	for range lockOrInsertTries {
		found, err := lock()
		if err != nil || found {
			return found, err
		}
		err = insert()
		if !isUniqueViolation(err) {
			return false, err
		}
	}
	return false, errors.New("the row kept appearing and disappearing under concurrent writers; try again")
}

// ToggleSet stores the kill switch of the toggle's kind, replacing every
// field of the one already stored for it, and appends the change to the
// history in the same transaction. A zero At is the current time. The
// previous state is judged at At: a stored switch that had expired by then
// was none. The switch's row is locked (or inserted) first, so concurrent
// changes of one kind record the history one after the other. MySQL has
// no notifications: workers see the change at their next poll.
func (e *executor) ToggleSet(ctx context.Context, p *twicestore.ToggleSetParams) error {
	tg := p.Toggle
	kind := driverkit.ToggleKey(tg.Kind)
	at := nowOr(tg.At)
	err := e.inTx(ctx, func(q dbtx) error {
		var prev twicetype.ToggleState
		lock := func() (found bool, err error) {
			prev, found, err = lockToggle(ctx, q, kind, at)
			return found, err
		}
		found, err := lockOrInsert(lock,
			func() error {
				_, err := q.ExecContext(ctx, `INSERT INTO twice_toggles (kind, enabled, reason, set_by, set_at, expires_at)
					VALUES (?, ?, ?, ?, ?, ?)`, kind, tg.Enabled, tg.Reason, tg.By, dbTime(at), nullTime(tg.ExpiresAt))
				return err
			})
		if err != nil {
			return err
		}
		if found {
			if _, err := q.ExecContext(ctx, `UPDATE twice_toggles SET enabled = ?, reason = ?, set_by = ?,
				set_at = ?, expires_at = ? WHERE kind = ?`,
				tg.Enabled, tg.Reason, tg.By, dbTime(at), nullTime(tg.ExpiresAt), kind); err != nil {
				return err
			}
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
// is not an error, and is recorded as none to none. When none is stored,
// a placeholder row is inserted and deleted again in the transaction: its
// lock orders the delete against a concurrent first set of the kind, which
// would otherwise find nothing to wait for.
func (e *executor) ToggleDelete(ctx context.Context, p *twicestore.ToggleDeleteParams) error {
	kind := driverkit.ToggleKey(p.Kind)
	at := nowOr(p.At)
	err := e.inTx(ctx, func(q dbtx) error {
		var prev twicetype.ToggleState
		lock := func() (found bool, err error) {
			prev, found, err = lockToggle(ctx, q, kind, at)
			return found, err
		}
		if _, err := lockOrInsert(lock,
			func() error {
				_, err := q.ExecContext(ctx, `INSERT INTO twice_toggles (kind, enabled, set_at) VALUES (?, 0, ?)`,
					kind, dbTime(at))
				return err
			}); err != nil {
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

// lockToggle locks the kind's stored switch for the rest of the
// transaction and reads it as the history records it, at now; found is
// false (and the state none) when no switch is stored.
func lockToggle(ctx context.Context, q dbtx, kind string, now time.Time) (state twicetype.ToggleState, found bool, err error) {
	var (
		tg      twicetype.Toggle
		expires sql.NullTime
	)
	err = q.QueryRowContext(ctx, `SELECT enabled, expires_at FROM twice_toggles WHERE kind = ? FOR UPDATE`, kind).
		Scan(&tg.Enabled, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return twicetype.ToggleNone, false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read the stored switch: %w", err)
	}
	tg.ExpiresAt = driverkit.FromNullTime(expires)
	return tg.StateOf(now), true, nil
}

// appendToggleChange adds one change to the switch history.
func appendToggleChange(ctx context.Context, q dbtx, c *twicetype.ToggleChange) error {
	if _, err := q.ExecContext(ctx, `INSERT INTO twice_toggle_history
		(kind, set_by, reason, previous_state, new_state, source, expires_at, changed_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		c.Kind, c.By, c.Reason, string(c.Previous), string(c.New), c.Source, nullTime(c.ExpiresAt), dbTime(c.At)); err != nil {
		return fmt.Errorf("record the change in the switch history: %w", err)
	}
	return nil
}

// ToggleList lists the stored kill switches that have not expired at Now,
// ordered by kind, byte by byte (the column is VARBINARY).
func (e *executor) ToggleList(ctx context.Context, p *twicestore.ToggleListParams) (*twicestore.ToggleListResult, error) {
	rows, err := e.db.QueryContext(ctx, `SELECT kind, enabled, reason, set_by, set_at, expires_at FROM twice_toggles
		WHERE expires_at IS NULL OR expires_at > ? ORDER BY kind`, dbTime(nowOr(p.Now)))
	if err != nil {
		return nil, fmt.Errorf("list toggles: %w", err)
	}
	toggles, err := driverkit.CollectList(rows, driverkit.ToggleRow(driverkit.NativeTimes))
	if err != nil {
		return nil, fmt.Errorf("list toggles: %w", err)
	}
	return &twicestore.ToggleListResult{Toggles: toggles}, nil
}

// ToggleHistory lists the switch history, newest first: a kind's, or every
// kind's when Kind is empty.
func (e *executor) ToggleHistory(ctx context.Context, p *twicestore.ToggleHistoryParams) (*twicestore.ToggleHistoryResult, error) {
	before := p.BeforeID
	if before <= 0 {
		before = math.MaxInt64
	}
	kind := driverkit.ToggleKey(p.Kind)
	rows, err := e.db.QueryContext(ctx, `SELECT id, kind, set_by, reason, previous_state, new_state, source,
		expires_at, changed_at FROM twice_toggle_history
		WHERE (? = '' OR kind = ?) AND id < ? ORDER BY id DESC`+limitClause(p.Limit), kind, kind, before)
	if err != nil {
		return nil, fmt.Errorf("list switch history: %w", err)
	}
	changes, err := driverkit.CollectList(rows, driverkit.ToggleChangeRow(driverkit.NativeTimes))
	if err != nil {
		return nil, fmt.Errorf("list switch history: %w", err)
	}
	return &twicestore.ToggleHistoryResult{Changes: changes}, nil
}

// limitClause is the LIMIT clause of a listing of at most limit rows; a
// limit of zero or less is none. MySQL has no "LIMIT ALL", and a LIMIT
// takes only a literal or a placeholder, so the clause is left out.
func limitClause(limit int) string {
	if limit <= 0 {
		return ""
	}
	return fmt.Sprintf(" LIMIT %d", limit)
}
