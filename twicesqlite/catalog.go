package twicesqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

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
				k.Timeout.Microseconds(), args, schedulesJSON(k), driverkit.LimitSettingJSON(twicetype.LimitSetting{Limit: k.Limit}),
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

// schedulesJSON encodes a kind's schedules for their column; none is "[]".
// The twicetype structs' json tags are the stored form, shared with the
// PostgreSQL driver.
func schedulesJSON(k twicetype.KindInfo) string {
	if k.Schedules == nil {
		return "[]"
	}
	return jsonArg(k.Schedules)
}

// CatalogList lists every catalogued kind ordered by kind, byte by byte
// (the column's BINARY collation).
func (e *executor) CatalogList(ctx context.Context, _ *twicestore.CatalogListParams) (*twicestore.CatalogListResult, error) {
	rows, err := e.db.QueryContext(ctx, `SELECT kind, queue, strategy, fail_closed, max_attempts, timeout_us,
		args, schedules, limits, handler_name, node, last_seen FROM twice_kinds ORDER BY kind`)
	if err != nil {
		return nil, fmt.Errorf("list kind catalog: %w", err)
	}
	res := &twicestore.CatalogListResult{Kinds: []twicetype.KindInfo{}}
	for row, err := range dbrows.Iter(rows) {
		if err != nil {
			return nil, fmt.Errorf("list kind catalog: %w", err)
		}
		var (
			k                       twicetype.KindInfo
			timeout, lastSeen       int64
			args, schedules, limits string
		)
		if err := row.Scan(&k.Kind, &k.Queue, &k.Strategy, &k.FailClosed, &k.MaxAttempts, &timeout,
			&args, &schedules, &limits, &k.HandlerName, &k.Node, &lastSeen); err != nil {
			return nil, fmt.Errorf("list kind catalog: %w", err)
		}
		if err := json.Unmarshal([]byte(args), &k.Args); err != nil {
			return nil, fmt.Errorf("list kind catalog: kind %q args: %w", k.Kind, err)
		}
		if err := json.Unmarshal([]byte(schedules), &k.Schedules); err != nil {
			return nil, fmt.Errorf("list kind catalog: kind %q schedules: %w", k.Kind, err)
		}
		if k.Limit, err = driverkit.CatalogLimit(limits); err != nil {
			return nil, fmt.Errorf("list kind catalog: kind %q: %w", k.Kind, err)
		}
		k.Timeout = time.Duration(timeout) * time.Microsecond
		k.LastSeen = time.UnixMicro(lastSeen).UTC()
		res.Kinds = append(res.Kinds, k)
	}
	return res, nil
}
