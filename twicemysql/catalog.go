package twicemysql

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// catalogColumns are the columns a publish writes, in catalogRow's order.
const catalogColumns = `kind, queue, strategy, fail_closed, max_attempts, timeout_us, args, schedules, limits,
	handler_name, node, last_seen`

// CatalogPublish stores the node's kinds in one transaction: every field
// of a kind is replaced by this publish, whichever node published it
// before, so the last publish of a kind wins — but for the sensitive flags
// a recent publish set, which driverkit.MergeCatalogArgs keeps from the
// stored row.
//
// The merge reads the stored rows, so concurrent publishes of a kind must
// not interleave: the rows already catalogued are locked (FOR UPDATE) and
// the kinds not catalogued yet are inserted, one multi-row INSERT that a
// concurrent first publish of one of them waits on (see lockOrInsert);
// the catalogued ones are then updated one by one under their locks.
// MySQL has no upsert that leaves the stored row readable first, hence
// the two steps. Kinds are taken in byte order, so two publishes lock
// shared kinds in the same order.
func (e *executor) CatalogPublish(ctx context.Context, p *twicestore.CatalogPublishParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if len(p.Kinds) == 0 {
		return nil
	}
	now := nowOr(p.Now)
	kinds := slices.SortedFunc(slices.Values(p.Kinds), func(a, b twicetype.KindInfo) int { return cmp.Compare(a.Kind, b.Kind) })
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.Kind
	}
	err := e.inTx(ctx, func(q dbtx) error {
		var stored map[string]string
		lock := func() (bool, error) {
			var err error
			stored, err = lockCatalogArgs(ctx, q, names)
			return len(stored) == len(names), err
		}
		if _, err := lockOrInsert(lock, func() error {
			var fresh []twicetype.KindInfo
			for _, k := range kinds {
				if _, ok := stored[k.Kind]; !ok {
					fresh = append(fresh, k)
				}
			}
			return insertCatalogKinds(ctx, q, fresh, p, now)
		}); err != nil {
			return err
		}
		for _, k := range kinds {
			prev, ok := stored[k.Kind]
			if !ok {
				continue // inserted above
			}
			row, err := catalogRow(k, prev, p, now)
			if err != nil {
				return err
			}
			if _, err := q.ExecContext(ctx, `UPDATE twice_kinds SET queue = ?, strategy = ?, fail_closed = ?,
				max_attempts = ?, timeout_us = ?, args = ?, schedules = ?, limits = ?, handler_name = ?,
				node = ?, last_seen = ? WHERE kind = ?`, append(row[1:], k.Kind)...); err != nil {
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

// insertCatalogKinds inserts kinds not catalogued yet, in one statement.
func insertCatalogKinds(ctx context.Context, q dbtx, kinds []twicetype.KindInfo, p *twicestore.CatalogPublishParams, now time.Time) error {
	var (
		values []byte
		args   []any
	)
	for i, k := range kinds {
		row, err := catalogRow(k, "", p, now)
		if err != nil {
			return err
		}
		if i > 0 {
			values = append(values, ", "...)
		}
		values = append(values, "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"...)
		args = append(args, row...)
	}
	_, err := q.ExecContext(ctx, `INSERT INTO twice_kinds (`+catalogColumns+`) VALUES `+string(values), args...)
	return err
}

// catalogRow is the values of catalogColumns for kind k of publish p at
// now, its args merged over prev, the stored args column ("" for a kind
// not catalogued yet).
func catalogRow(k twicetype.KindInfo, prev string, p *twicestore.CatalogPublishParams, now time.Time) ([]any, error) {
	args, err := driverkit.MergeCatalogArgs(prev, k.Args, now, p.KeepSensitiveSince)
	if err != nil {
		return nil, fmt.Errorf("kind %q: %w", k.Kind, err)
	}
	return []any{k.Kind, k.Queue, k.Strategy, k.FailClosed, k.MaxAttempts, k.Timeout.Microseconds(), args,
		driverkit.SchedulesJSON(k), driverkit.LimitSettingJSON(twicetype.LimitSetting{Limit: k.Limit}), k.HandlerName,
		p.Node, dbTime(now)}, nil
}

// lockCatalogArgs locks the rows of kinds the catalog holds, until the
// transaction ends, and reads their args column, by kind.
func lockCatalogArgs(ctx context.Context, q dbtx, kinds []string) (map[string]string, error) {
	list, args := in(kinds)
	rows, err := q.QueryContext(ctx, `SELECT kind, args FROM twice_kinds WHERE kind IN `+list+` ORDER BY kind FOR UPDATE`, args...)
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
// (the column is VARBINARY).
func (e *executor) CatalogList(ctx context.Context, _ *twicestore.CatalogListParams) (*twicestore.CatalogListResult, error) {
	rows, err := e.db.QueryContext(ctx, `SELECT `+catalogColumns+` FROM twice_kinds ORDER BY kind`)
	if err != nil {
		return nil, fmt.Errorf("list kind catalog: %w", err)
	}
	kinds, err := driverkit.CollectList(rows, driverkit.KindInfoRow(driverkit.NativeTimes))
	if err != nil {
		return nil, fmt.Errorf("list kind catalog: %w", err)
	}
	return &twicestore.CatalogListResult{Kinds: kinds}, nil
}
