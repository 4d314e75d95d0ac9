package twicemysql

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// LimitOverrideSet stores the override, replacing the one of the same
// scope and name, and appends the change to the history in the same
// transaction. The override's row is locked (or inserted) first, as a
// kill switch's is (lockOrInsert), so concurrent changes record the
// history one after the other. MySQL has no notifications: workers see
// the override at their next poll.
func (e *executor) LimitOverrideSet(ctx context.Context, p *twicestore.LimitOverrideSetParams) (*twicestore.LimitOverrideSetResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	o := p.Override
	at := nowOr(o.At)
	setting := driverkit.LimitSettingJSON(o.LimitSetting)
	res := &twicestore.LimitOverrideSetResult{}
	err := e.inTx(ctx, func(q dbtx) error {
		lock := func() (bool, error) {
			var err error
			res.Previous, err = lockLimitOverride(ctx, q, o.Scope, o.Name)
			return res.Previous != nil, err
		}
		found, err := lockOrInsert(lock, func() error {
			_, err := q.ExecContext(ctx, `INSERT INTO twice_limit_overrides (scope, name, setting, set_by, reason, set_at)
				VALUES (?, ?, ?, ?, ?, ?)`, o.Scope, o.Name, setting, o.By, o.Reason, dbTime(at))
			return err
		})
		if err != nil {
			return err
		}
		if found {
			if _, err := q.ExecContext(ctx, `UPDATE twice_limit_overrides SET setting = ?, set_by = ?, reason = ?,
				set_at = ? WHERE scope = ? AND name = ?`, setting, o.By, o.Reason, dbTime(at), o.Scope, o.Name); err != nil {
				return err
			}
		}
		return appendLimitChange(ctx, q, o.Scope, o.Name, res.Previous, &o.LimitSetting, o.By, o.Reason, at)
	})
	if err != nil {
		return nil, fmt.Errorf("set the %s limit override of %q: %w", o.Scope, o.Name, err)
	}
	return res, nil
}

// LimitOverrideClear removes the override and appends the change to the
// history in the same transaction; with none stored it writes nothing (a
// concurrent first set that has not committed is ordered after it).
func (e *executor) LimitOverrideClear(ctx context.Context, p *twicestore.LimitOverrideClearParams) (*twicestore.LimitOverrideClearResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	at := nowOr(p.At)
	res := &twicestore.LimitOverrideClearResult{}
	err := e.inTx(ctx, func(q dbtx) error {
		prev, err := lockLimitOverride(ctx, q, p.Scope, p.Name)
		if err != nil || prev == nil {
			return err
		}
		res.Previous = prev
		if _, err := q.ExecContext(ctx, `DELETE FROM twice_limit_overrides WHERE scope = ? AND name = ?`, p.Scope, p.Name); err != nil {
			return err
		}
		return appendLimitChange(ctx, q, p.Scope, p.Name, prev, nil, p.By, p.Reason, at)
	})
	if err != nil {
		return nil, fmt.Errorf("clear the %s limit override of %q: %w", p.Scope, p.Name, err)
	}
	return res, nil
}

// lockLimitOverride locks one stored override until the transaction ends
// and reads it; nil when none is stored.
func lockLimitOverride(ctx context.Context, q dbtx, scope twicetype.LimitScope, name string) (*twicetype.LimitOverride, error) {
	rows, err := q.QueryContext(ctx, `SELECT scope, name, setting, set_by, reason, set_at
		FROM twice_limit_overrides WHERE scope = ? AND name = ? FOR UPDATE`, scope, name)
	if err != nil {
		return nil, fmt.Errorf("read the stored override: %w", err)
	}
	found, err := dbrows.Collect(rows, driverkit.LimitOverrideRow(driverkit.NativeTimes))
	if err != nil || len(found) == 0 {
		return nil, err
	}
	return &found[0], nil
}

// appendLimitChange adds one change to the limit history: prev is the
// override before (nil for none), next the setting after (nil for a clear).
func appendLimitChange(ctx context.Context, q dbtx, scope twicetype.LimitScope, name string,
	prev *twicetype.LimitOverride, next *twicetype.LimitSetting, by, reason string, at time.Time) error {
	var previous *twicetype.LimitSetting
	if prev != nil {
		previous = &prev.LimitSetting
	}
	if _, err := q.ExecContext(ctx, `INSERT INTO twice_limit_history (scope, name, previous, new, set_by, reason, changed_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, scope, name,
		driverkit.OptionalLimitSettingJSON(previous), driverkit.OptionalLimitSettingJSON(next), by, reason, dbTime(at)); err != nil {
		return fmt.Errorf("record the change in the limit history: %w", err)
	}
	return nil
}

// LimitOverrideList lists the stored overrides by scope, then by name,
// byte by byte (scope is "kind" or "queue", in that order whatever the
// collation; name is VARBINARY).
func (e *executor) LimitOverrideList(ctx context.Context, _ *twicestore.LimitOverrideListParams) (*twicestore.LimitOverrideListResult, error) {
	rows, err := e.db.QueryContext(ctx, `SELECT scope, name, setting, set_by, reason, set_at
		FROM twice_limit_overrides ORDER BY scope, name`)
	if err != nil {
		return nil, fmt.Errorf("list limit overrides: %w", err)
	}
	out, err := dbrows.Collect(rows, driverkit.LimitOverrideRow(driverkit.NativeTimes))
	if err != nil {
		return nil, fmt.Errorf("list limit overrides: %w", err)
	}
	return &twicestore.LimitOverrideListResult{Overrides: out}, nil
}

// LimitHistory lists the limit history, newest first: one override's, or
// every one's when Name is empty.
func (e *executor) LimitHistory(ctx context.Context, p *twicestore.LimitHistoryParams) (*twicestore.LimitHistoryResult, error) {
	before := p.BeforeID
	if before <= 0 {
		before = math.MaxInt64
	}
	rows, err := e.db.QueryContext(ctx, `SELECT id, scope, name, previous, new, set_by, reason, changed_at
		FROM twice_limit_history
		WHERE (? = '' OR (scope = ? AND name = ?)) AND id < ? ORDER BY id DESC`+limitClause(p.Limit),
		p.Name, string(p.Scope), p.Name, before)
	if err != nil {
		return nil, fmt.Errorf("list limit history: %w", err)
	}
	out, err := dbrows.Collect(rows, driverkit.LimitChangeRow(driverkit.NativeTimes))
	if err != nil {
		return nil, fmt.Errorf("list limit history: %w", err)
	}
	return &twicestore.LimitHistoryResult{Changes: out}, nil
}

// LimitHistoryPrune deletes up to Limit limit-history rows changed before
// Before, oldest first, but never an override's newest (found by
// twice_limit_history_name).
func (e *executor) LimitHistoryPrune(ctx context.Context, p *twicestore.LimitHistoryPruneParams) (*twicestore.PruneResult, error) {
	n, err := pruneBefore[int64](ctx, e, `SELECT h.id FROM twice_limit_history AS h
		WHERE h.changed_at < ?
		  AND EXISTS (SELECT 1 FROM twice_limit_history AS n WHERE n.scope = h.scope AND n.name = h.name AND n.id > h.id)
		ORDER BY h.id`, "twice_limit_history", p.Before, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("prune limit history: %w", err)
	}
	return &twicestore.PruneResult{Deleted: n}, nil
}
