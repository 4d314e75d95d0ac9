package twicepg

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
// transaction. The write notifies the kill switch channel when it
// commits, so every worker's ListenToggles re-reads the overrides at once.
func (e *executor) LimitOverrideSet(ctx context.Context, p *twicestore.LimitOverrideSetParams) (*twicestore.LimitOverrideSetResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	o := p.Override
	at := nowOr(o.At)
	res := &twicestore.LimitOverrideSetResult{}
	err := e.inTx(ctx, func(tx *executor) error {
		prev, err := tx.lockLimitOverride(ctx, o.Scope, o.Name)
		if err != nil {
			return err
		}
		res.Previous = prev
		if _, err := tx.q.exec(ctx, `WITH set AS (
				INSERT INTO twice_limit_overrides (scope, name, setting, set_by, reason, set_at)
				VALUES ($1, $2, $3::jsonb, $4, $5, $6)
				ON CONFLICT (scope, name) DO UPDATE SET setting = excluded.setting, set_by = excluded.set_by,
					reason = excluded.reason, set_at = excluded.set_at
				RETURNING name)
			SELECT pg_notify($7, 'limit') FROM set`,
			o.Scope, o.Name, driverkit.LimitSettingJSON(o.LimitSetting), o.By, o.Reason, at, e.notify.toggleChannel); err != nil {
			return err
		}
		return tx.appendLimitChange(ctx, o.Scope, o.Name, prev, &o.LimitSetting, o.By, o.Reason, at)
	})
	if err != nil {
		return nil, fmt.Errorf("set the %s limit override of %q: %w", o.Scope, o.Name, err)
	}
	return res, nil
}

// LimitOverrideClear removes the override and appends the change to the
// history in the same transaction, notifying as LimitOverrideSet does;
// with none stored it writes nothing.
func (e *executor) LimitOverrideClear(ctx context.Context, p *twicestore.LimitOverrideClearParams) (*twicestore.LimitOverrideClearResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	at := nowOr(p.At)
	res := &twicestore.LimitOverrideClearResult{}
	err := e.inTx(ctx, func(tx *executor) error {
		prev, err := tx.lockLimitOverride(ctx, p.Scope, p.Name)
		if err != nil || prev == nil {
			return err
		}
		res.Previous = prev
		if _, err := tx.q.exec(ctx, `WITH gone AS (DELETE FROM twice_limit_overrides WHERE scope = $1 AND name = $2 RETURNING name)
			SELECT pg_notify($3, 'limit') FROM gone`, p.Scope, p.Name, e.notify.toggleChannel); err != nil {
			return err
		}
		return tx.appendLimitChange(ctx, p.Scope, p.Name, prev, nil, p.By, p.Reason, at)
	})
	if err != nil {
		return nil, fmt.Errorf("clear the %s limit override of %q: %w", p.Scope, p.Name, err)
	}
	return res, nil
}

// lockLimitOverride serialises the changes of one override until the
// transaction ends, then reads it (nil when none is stored). As for the
// kill switches (lockToggle), a row lock would not do: a first set has no
// row to lock.
func (e *executor) lockLimitOverride(ctx context.Context, scope twicetype.LimitScope, name string) (*twicetype.LimitOverride, error) {
	if _, err := e.q.exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('twice.limit:' || $1 || ':' || $2, 0))`,
		scope, name); err != nil {
		return nil, fmt.Errorf("lock the override: %w", err)
	}
	rs, err := e.q.query(ctx, `SELECT scope, name, setting::text, set_by, reason, set_at
		FROM twice_limit_overrides WHERE scope = $1 AND name = $2`, scope, name)
	if err != nil {
		return nil, fmt.Errorf("read the stored override: %w", err)
	}
	found, err := dbrows.Collect(rs, driverkit.LimitOverrideRow(driverkit.NativeTimes))
	if err != nil || len(found) == 0 {
		return nil, err
	}
	return &found[0], nil
}

func (e *executor) appendLimitChange(ctx context.Context, scope twicetype.LimitScope, name string,
	prev *twicetype.LimitOverride, next *twicetype.LimitSetting, by, reason string, at time.Time) error {
	var previous *twicetype.LimitSetting
	if prev != nil {
		previous = &prev.LimitSetting
	}
	if _, err := e.q.exec(ctx, `INSERT INTO twice_limit_history (scope, name, previous, new, set_by, reason, changed_at)
		VALUES ($1, $2, $3::jsonb, $4::jsonb, $5, $6, $7)`, scope, name,
		driverkit.OptionalLimitSettingJSON(previous), driverkit.OptionalLimitSettingJSON(next), by, reason, at); err != nil {
		return fmt.Errorf("record the change in the limit history: %w", err)
	}
	return nil
}

// LimitOverrideList lists the stored overrides by scope, then by the
// name's bytes (COLLATE "C", as ToggleList).
func (e *executor) LimitOverrideList(ctx context.Context, _ *twicestore.LimitOverrideListParams) (*twicestore.LimitOverrideListResult, error) {
	rs, err := e.q.query(ctx, `SELECT scope, name, setting::text, set_by, reason, set_at
		FROM twice_limit_overrides ORDER BY scope COLLATE "C", name COLLATE "C"`)
	if err != nil {
		return nil, fmt.Errorf("list limit overrides: %w", err)
	}
	out, err := dbrows.Collect(rs, driverkit.LimitOverrideRow(driverkit.NativeTimes))
	if err != nil {
		return nil, fmt.Errorf("list limit overrides: %w", err)
	}
	return &twicestore.LimitOverrideListResult{Overrides: out}, nil
}

// LimitHistory lists the limit history, newest first: one override's, or
// every one's when Name is empty.
func (e *executor) LimitHistory(ctx context.Context, p *twicestore.LimitHistoryParams) (*twicestore.LimitHistoryResult, error) {
	var before any
	if p.BeforeID > 0 {
		before = p.BeforeID
	}
	rs, err := e.q.query(ctx, `SELECT id, scope, name, previous::text, new::text, set_by, reason, changed_at
		FROM twice_limit_history
		WHERE ($1::text = '' OR (scope = $2 AND name = $1)) AND ($3::bigint IS NULL OR id < $3)
		ORDER BY id DESC LIMIT $4`, p.Name, string(p.Scope), before, limitArg(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list limit history: %w", err)
	}
	out, err := dbrows.Collect(rs, driverkit.LimitChangeRow(driverkit.NativeTimes))
	if err != nil {
		return nil, fmt.Errorf("list limit history: %w", err)
	}
	return &twicestore.LimitHistoryResult{Changes: out}, nil
}

// limitHistoryPruneSQL deletes one batch of the oldest limit-history rows
// changed before $1, but never an override's newest (found by
// twice_limit_history_name).
const limitHistoryPruneSQL = `DELETE FROM twice_limit_history WHERE id IN (
	SELECT h.id FROM twice_limit_history AS h
	WHERE h.changed_at < $1
	  AND EXISTS (SELECT 1 FROM twice_limit_history AS n WHERE n.scope = h.scope AND n.name = h.name AND n.id > h.id)
	ORDER BY h.id LIMIT $2
	FOR UPDATE SKIP LOCKED)`

// LimitHistoryPrune deletes up to Limit limit-history rows changed before
// Before, oldest first, but never an override's newest.
func (e *executor) LimitHistoryPrune(ctx context.Context, p *twicestore.LimitHistoryPruneParams) (*twicestore.PruneResult, error) {
	n, err := e.pruneBefore(ctx, limitHistoryPruneSQL, p.Before, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("prune limit history: %w", err)
	}
	return &twicestore.PruneResult{Deleted: n}, nil
}
