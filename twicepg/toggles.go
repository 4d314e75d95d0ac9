package twicepg

import (
	"context"
	"fmt"
	"strings"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// toggleKey is how a kind is stored as a toggle's key. It is lower-cased in
// Go, not with SQL's lower(), whose result depends on the database's
// locale: both drivers then store the same key for the same kind.
func toggleKey(kind string) string { return strings.ToLower(kind) }

// ToggleSet stores the kill switch of the toggle's kind, replacing every
// field of the one already stored for it. A zero At is the current time.
func (e *executor) ToggleSet(ctx context.Context, p *twicestore.ToggleSetParams) error {
	tg := p.Toggle
	kind := toggleKey(tg.Kind)
	// The notification goes out when the write commits, and wakes every
	// worker's ListenToggles at once.
	_, err := e.q.exec(ctx, `WITH set AS (
			INSERT INTO twice_toggles (kind, enabled, reason, set_by, set_at)
			VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (kind) DO UPDATE SET enabled = excluded.enabled, reason = excluded.reason,
				set_by = excluded.set_by, set_at = excluded.set_at
			RETURNING kind)
		SELECT pg_notify($6, kind) FROM set`,
		kind, tg.Enabled, tg.Reason, tg.By, nowOr(tg.At), e.notify.toggleChannel)
	if err != nil {
		return fmt.Errorf("set toggle %q: %w", kind, err)
	}
	return nil
}

// ToggleDelete removes the kill switch of the kind; removing one that is not
// stored is not an error.
func (e *executor) ToggleDelete(ctx context.Context, p *twicestore.ToggleDeleteParams) error {
	kind := toggleKey(p.Kind)
	if _, err := e.q.exec(ctx, `WITH gone AS (DELETE FROM twice_toggles WHERE kind = $1 RETURNING kind)
		SELECT pg_notify($2, kind) FROM gone`, kind, e.notify.toggleChannel); err != nil {
		return fmt.Errorf("delete toggle %q: %w", kind, err)
	}
	return nil
}

// ToggleList lists the stored kill switches ordered by kind. COLLATE "C"
// orders by bytes, as SQLite does, rather than by the database's locale,
// which may ignore punctuation such as the dash in "a-c" (glibc's en_US
// does).
func (e *executor) ToggleList(ctx context.Context, _ *twicestore.ToggleListParams) (*twicestore.ToggleListResult, error) {
	rs, err := e.q.query(ctx, `SELECT kind, enabled, reason, set_by, set_at FROM twice_toggles ORDER BY kind COLLATE "C"`)
	if err != nil {
		return nil, fmt.Errorf("list toggles: %w", err)
	}
	defer rs.Close()
	toggles := []twicetype.Toggle{}
	for rs.Next() {
		var tg twicetype.Toggle
		if err := rs.Scan(&tg.Kind, &tg.Enabled, &tg.Reason, &tg.By, &tg.At); err != nil {
			return nil, fmt.Errorf("list toggles: %w", err)
		}
		tg.At = tg.At.UTC()
		toggles = append(toggles, tg)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("list toggles: %w", err)
	}
	return &twicestore.ToggleListResult{Toggles: toggles}, nil
}
