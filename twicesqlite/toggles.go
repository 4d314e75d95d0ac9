package twicesqlite

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// toggleKey is how a kind is stored as a toggle's key. It is lower-cased in
// Go, not with SQL's lower(), which in SQLite folds ASCII only: both drivers
// then store the same key for the same kind.
func toggleKey(kind string) string { return strings.ToLower(kind) }

// ToggleSet stores the kill switch of the toggle's kind, replacing every
// field of the one already stored for it. A zero At is the current time.
func (e *executor) ToggleSet(ctx context.Context, p *twicestore.ToggleSetParams) error {
	tg := p.Toggle
	kind := toggleKey(tg.Kind)
	err := e.write(ctx, func() error {
		_, err := e.db.ExecContext(ctx, `INSERT INTO twice_toggles (kind, enabled, reason, set_by, set_at)
		VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (kind) DO UPDATE SET enabled = excluded.enabled, reason = excluded.reason,
			set_by = excluded.set_by, set_at = excluded.set_at`,
			kind, tg.Enabled, tg.Reason, tg.By, micros(nowOr(tg.At)))
		return err
	})
	if err != nil {
		return fmt.Errorf("set toggle %q: %w", kind, err)
	}
	return nil
}

// ToggleDelete removes the kill switch of the kind; removing one that is not
// stored is not an error.
func (e *executor) ToggleDelete(ctx context.Context, p *twicestore.ToggleDeleteParams) error {
	kind := toggleKey(p.Kind)
	err := e.write(ctx, func() error {
		_, err := e.db.ExecContext(ctx, `DELETE FROM twice_toggles WHERE kind = ?`, kind)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete toggle %q: %w", kind, err)
	}
	return nil
}

// ToggleList lists the stored kill switches ordered by kind, byte by byte
// (the column's BINARY collation).
func (e *executor) ToggleList(ctx context.Context, _ *twicestore.ToggleListParams) (*twicestore.ToggleListResult, error) {
	rows, err := e.db.QueryContext(ctx, `SELECT kind, enabled, reason, set_by, set_at FROM twice_toggles ORDER BY kind`)
	if err != nil {
		return nil, fmt.Errorf("list toggles: %w", err)
	}
	defer rows.Close()
	toggles := []twicetype.Toggle{}
	for rows.Next() {
		var (
			tg twicetype.Toggle
			at int64
		)
		if err := rows.Scan(&tg.Kind, &tg.Enabled, &tg.Reason, &tg.By, &at); err != nil {
			return nil, fmt.Errorf("list toggles: %w", err)
		}
		tg.At = time.UnixMicro(at).UTC()
		toggles = append(toggles, tg)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list toggles: %w", err)
	}
	return &twicestore.ToggleListResult{Toggles: toggles}, nil
}
