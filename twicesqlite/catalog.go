package twicesqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// CatalogPublish upserts the node's kinds in one transaction: every field
// of a kind is replaced by this publish, whichever node published it
// before, so the last publish of a kind wins.
func (e *executor) CatalogPublish(ctx context.Context, p *twicestore.CatalogPublishParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if len(p.Kinds) == 0 {
		return nil
	}
	now := micros(nowOr(p.Now))
	err := e.inTx(ctx, func(q dbtx) error {
		stmt, err := q.PrepareContext(ctx, `INSERT INTO twice_kinds
			(kind, queue, strategy, fail_closed, max_attempts, timeout_us, args, schedules, node, last_seen)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (kind) DO UPDATE SET queue = excluded.queue, strategy = excluded.strategy,
			fail_closed = excluded.fail_closed, max_attempts = excluded.max_attempts,
			timeout_us = excluded.timeout_us, args = excluded.args, schedules = excluded.schedules,
			node = excluded.node, last_seen = excluded.last_seen`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, k := range p.Kinds {
			args, schedules := catalogJSON(k)
			if _, err := stmt.ExecContext(ctx, k.Kind, k.Queue, k.Strategy, k.FailClosed, k.MaxAttempts,
				k.Timeout.Microseconds(), args, schedules, p.Node, now); err != nil {
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

// catalogJSON encodes a kind's args fields and schedules for their
// columns; none is "[]". The twicetype structs' json tags are the stored
// form, shared with the PostgreSQL driver.
func catalogJSON(k twicetype.KindInfo) (args, schedules string) {
	a, s := k.Args, k.Schedules
	if a == nil {
		a = []twicetype.ArgField{}
	}
	if s == nil {
		s = []twicetype.KindSchedule{}
	}
	return jsonArg(a), jsonArg(s)
}

// CatalogList lists every catalogued kind ordered by kind, byte by byte
// (the column's BINARY collation).
func (e *executor) CatalogList(ctx context.Context, _ *twicestore.CatalogListParams) (*twicestore.CatalogListResult, error) {
	rows, err := e.db.QueryContext(ctx, `SELECT kind, queue, strategy, fail_closed, max_attempts, timeout_us,
		args, schedules, node, last_seen FROM twice_kinds ORDER BY kind`)
	if err != nil {
		return nil, fmt.Errorf("list kind catalog: %w", err)
	}
	defer rows.Close()
	res := &twicestore.CatalogListResult{Kinds: []twicetype.KindInfo{}}
	for rows.Next() {
		var (
			k                 twicetype.KindInfo
			timeout, lastSeen int64
			args, schedules   string
		)
		if err := rows.Scan(&k.Kind, &k.Queue, &k.Strategy, &k.FailClosed, &k.MaxAttempts, &timeout,
			&args, &schedules, &k.Node, &lastSeen); err != nil {
			return nil, fmt.Errorf("list kind catalog: %w", err)
		}
		if err := json.Unmarshal([]byte(args), &k.Args); err != nil {
			return nil, fmt.Errorf("list kind catalog: kind %q args: %w", k.Kind, err)
		}
		if err := json.Unmarshal([]byte(schedules), &k.Schedules); err != nil {
			return nil, fmt.Errorf("list kind catalog: kind %q schedules: %w", k.Kind, err)
		}
		k.Timeout = time.Duration(timeout) * time.Microsecond
		k.LastSeen = time.UnixMicro(lastSeen).UTC()
		res.Kinds = append(res.Kinds, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list kind catalog: %w", err)
	}
	return res, nil
}
