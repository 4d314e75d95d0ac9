package twicesqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// LimitOverrideSet stores the override, replacing the one of the same
// scope and name, and appends the change to the history in the same
// transaction, which holds the write lock (so no other writer changes the
// override between the read of the previous one and the write).
func (e *executor) LimitOverrideSet(ctx context.Context, p *twicestore.LimitOverrideSetParams) (*twicestore.LimitOverrideSetResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	o := p.Override
	at := nowOr(o.At)
	res := &twicestore.LimitOverrideSetResult{}
	err := e.inTx(ctx, func(q dbtx) error {
		prev, err := storedLimitOverride(ctx, q, o.Scope, o.Name)
		if err != nil {
			return err
		}
		res.Previous = prev
		if _, err := q.ExecContext(ctx, `INSERT INTO twice_limit_overrides (scope, name, setting, set_by, reason, set_at)
			VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (scope, name) DO UPDATE SET setting = excluded.setting, set_by = excluded.set_by,
				reason = excluded.reason, set_at = excluded.set_at`,
			o.Scope, o.Name, driverkit.LimitSettingJSON(o.LimitSetting), o.By, o.Reason, micros(at)); err != nil {
			return err
		}
		return appendLimitChange(ctx, q, o.Scope, o.Name, prev, &o.LimitSetting, o.By, o.Reason, at)
	})
	if err != nil {
		return nil, fmt.Errorf("set the %s limit override of %q: %w", o.Scope, o.Name, err)
	}
	return res, nil
}

// LimitOverrideClear removes the override and appends the change to the
// history in the same transaction; with none stored it writes nothing.
func (e *executor) LimitOverrideClear(ctx context.Context, p *twicestore.LimitOverrideClearParams) (*twicestore.LimitOverrideClearResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	at := nowOr(p.At)
	res := &twicestore.LimitOverrideClearResult{}
	err := e.inTx(ctx, func(q dbtx) error {
		prev, err := storedLimitOverride(ctx, q, p.Scope, p.Name)
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

// storedLimitOverride reads one stored override, nil when none is.
func storedLimitOverride(ctx context.Context, q dbtx, scope twicetype.LimitScope, name string) (*twicetype.LimitOverride, error) {
	rows, err := q.QueryContext(ctx, `SELECT scope, name, setting, set_by, reason, set_at
		FROM twice_limit_overrides WHERE scope = ? AND name = ?`, scope, name)
	if err != nil {
		return nil, fmt.Errorf("read the stored override: %w", err)
	}
	found, err := dbrows.Collect(rows, driverkit.LimitOverrideRow(driverkit.MicrosTimes))
	if err != nil || len(found) == 0 {
		return nil, err
	}
	return &found[0], nil
}

func appendLimitChange(ctx context.Context, q dbtx, scope twicetype.LimitScope, name string,
	prev *twicetype.LimitOverride, next *twicetype.LimitSetting, by, reason string, at time.Time) error {
	var previous *twicetype.LimitSetting
	if prev != nil {
		previous = &prev.LimitSetting
	}
	if _, err := q.ExecContext(ctx, `INSERT INTO twice_limit_history (scope, name, previous, new, set_by, reason, changed_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, scope, name,
		driverkit.OptionalLimitSettingJSON(previous), driverkit.OptionalLimitSettingJSON(next), by, reason, micros(at)); err != nil {
		return fmt.Errorf("record the change in the limit history: %w", err)
	}
	return nil
}

// LimitOverrideList lists the stored overrides by scope, then by name,
// byte by byte (the columns' BINARY collation).
func (e *executor) LimitOverrideList(ctx context.Context, _ *twicestore.LimitOverrideListParams) (*twicestore.LimitOverrideListResult, error) {
	rows, err := e.db.QueryContext(ctx, `SELECT scope, name, setting, set_by, reason, set_at
		FROM twice_limit_overrides ORDER BY scope, name`)
	if err != nil {
		return nil, fmt.Errorf("list limit overrides: %w", err)
	}
	out, err := dbrows.Collect(rows, driverkit.LimitOverrideRow(driverkit.MicrosTimes))
	if err != nil {
		return nil, fmt.Errorf("list limit overrides: %w", err)
	}
	return &twicestore.LimitOverrideListResult{Overrides: out}, nil
}

// LimitHistory lists the limit history, newest first: one override's, or
// every one's when Name is empty.
func (e *executor) LimitHistory(ctx context.Context, p *twicestore.LimitHistoryParams) (*twicestore.LimitHistoryResult, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = -1 // no limit in SQLite
	}
	before := p.BeforeID
	if before <= 0 {
		before = 1<<63 - 1
	}
	rows, err := e.db.QueryContext(ctx, `SELECT id, scope, name, previous, new, set_by, reason, changed_at
		FROM twice_limit_history
		WHERE (?1 = '' OR (scope = ?2 AND name = ?1)) AND id < ?3 ORDER BY id DESC LIMIT ?4`,
		p.Name, string(p.Scope), before, limit)
	if err != nil {
		return nil, fmt.Errorf("list limit history: %w", err)
	}
	out, err := dbrows.Collect(rows, driverkit.LimitChangeRow(driverkit.MicrosTimes))
	if err != nil {
		return nil, fmt.Errorf("list limit history: %w", err)
	}
	return &twicestore.LimitHistoryResult{Changes: out}, nil
}

// LimitHistoryPrune deletes up to Limit limit-history rows changed before
// Before, oldest first, but never an override's newest (found by
// twice_limit_history_name).
func (e *executor) LimitHistoryPrune(ctx context.Context, p *twicestore.LimitHistoryPruneParams) (*twicestore.PruneResult, error) {
	n, err := e.pruneBefore(ctx, `DELETE FROM twice_limit_history WHERE id IN (
		SELECT h.id FROM twice_limit_history AS h
		WHERE h.changed_at < ?
		  AND EXISTS (SELECT 1 FROM twice_limit_history AS n WHERE n.scope = h.scope AND n.name = h.name AND n.id > h.id)
		ORDER BY h.id LIMIT ?)`, p.Before, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("prune limit history: %w", err)
	}
	return &twicestore.PruneResult{Deleted: n}, nil
}
