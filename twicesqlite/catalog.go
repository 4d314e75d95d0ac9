package twicesqlite

import (
	"context"
	"fmt"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// CatalogPublish upserts the node's kinds in one transaction: every field
// of a kind is replaced by this publish, whichever node published it
// before, so the last publish of a kind wins — but for the sensitive flags
// a recent publish set, which driverkit.MergeCatalogArgs keeps from the
// stored row (the transaction holds the write lock: _txlock=immediate).
func (e *executor) CatalogPublish(ctx context.Context, p *twicestore.CatalogPublishParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if len(p.Kinds) == 0 {
		return nil
	}
	now := nowOr(p.Now)
	names := make([]string, len(p.Kinds))
	for i, k := range p.Kinds {
		names[i] = k.Kind
	}
	err := e.inTx(ctx, func(q dbtx) error {
		stored, err := storedCatalogArgs(ctx, q, names)
		if err != nil {
			return err
		}
		stmt, err := q.PrepareContext(ctx, `INSERT INTO twice_kinds
			(kind, queue, strategy, fail_closed, max_attempts, timeout_us, args, schedules, limits, handler_name, node, last_seen)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (kind) DO UPDATE SET queue = excluded.queue, strategy = excluded.strategy,
			fail_closed = excluded.fail_closed, max_attempts = excluded.max_attempts,
			timeout_us = excluded.timeout_us, args = excluded.args, schedules = excluded.schedules,
			limits = excluded.limits, handler_name = excluded.handler_name,
			node = excluded.node, last_seen = excluded.last_seen`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, k := range p.Kinds {
			args, err := driverkit.MergeCatalogArgs(stored[k.Kind], k.Args, now, p.KeepSensitiveSince)
			if err != nil {
				return fmt.Errorf("kind %q: %w", k.Kind, err)
			}
			if _, err := stmt.ExecContext(ctx, k.Kind, k.Queue, k.Strategy, k.FailClosed, k.MaxAttempts,
				k.Timeout.Microseconds(), args, driverkit.SchedulesJSON(k), driverkit.LimitSettingJSON(twicetype.LimitSetting{Limit: k.Limit}),
				k.HandlerName, p.Node, micros(now)); err != nil {
				return fmt.Errorf("kind %q: %w", k.Kind, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("publish kind catalog of node %q: %w", p.Node, err)
	}
	return nil
}

// storedCatalogArgs reads the stored args column of each of kinds that
// the catalog holds, by kind.
func storedCatalogArgs(ctx context.Context, q dbtx, kinds []string) (map[string]string, error) {
	rows, err := q.QueryContext(ctx, `SELECT kind, args FROM twice_kinds WHERE kind IN (SELECT value FROM json_each(?))`, jsonArg(kinds))
	if err != nil {
		return nil, fmt.Errorf("read the stored kinds: %w", err)
	}
	out, err := dbrows.Pairs[string, string](rows)
	if err != nil {
		return nil, fmt.Errorf("read the stored kinds: %w", err)
	}
	return out, nil
}

// CatalogList lists every catalogued kind ordered by kind, byte by byte
// (the column's BINARY collation).
func (e *executor) CatalogList(ctx context.Context, _ *twicestore.CatalogListParams) (*twicestore.CatalogListResult, error) {
	rows, err := e.db.QueryContext(ctx, `SELECT kind, queue, strategy, fail_closed, max_attempts, timeout_us,
		args, schedules, limits, handler_name, node, last_seen FROM twice_kinds ORDER BY kind`)
	if err != nil {
		return nil, fmt.Errorf("list kind catalog: %w", err)
	}
	kinds, err := driverkit.CollectList(rows, driverkit.KindInfoRow(driverkit.MicrosTimes))
	if err != nil {
		return nil, fmt.Errorf("list kind catalog: %w", err)
	}
	return &twicestore.CatalogListResult{Kinds: kinds}, nil
}
