package twicepg

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
// stored row. The catalog's advisory lock orders concurrent publishes, so
// none merges over a row another is rewriting (row locks cannot: a kind's
// first publish has no row to lock). The kinds go in as parallel arrays:
// the same four statements whatever their number. The limits go in
// driverkit's stored form.
func (e *executor) CatalogPublish(ctx context.Context, p *twicestore.CatalogPublishParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if len(p.Kinds) == 0 {
		return nil
	}
	now := nowOr(p.Now)
	n := len(p.Kinds)
	var (
		kinds, queues, strategies = make([]string, n), make([]string, n), make([]string, n)
		handlers                  = make([]string, n)
		failClosed                = make([]bool, n)
		maxAttempts               = make([]int64, n)
		timeouts                  = make([]int64, n)
		args, schedules, limits   = make([]string, n), make([]string, n), make([]string, n)
	)
	for i, k := range p.Kinds {
		kinds[i], queues[i], strategies[i], handlers[i] = k.Kind, k.Queue, k.Strategy, k.HandlerName
		failClosed[i], maxAttempts[i], timeouts[i] = k.FailClosed, int64(k.MaxAttempts), k.Timeout.Microseconds()
		schedules[i] = driverkit.SchedulesJSON(k)
		limits[i] = driverkit.LimitSettingJSON(twicetype.LimitSetting{Limit: k.Limit})
	}
	err := e.inTx(ctx, func(tx *executor) error {
		if _, err := tx.q.exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('twice.catalog ' || current_schema(), 0))`); err != nil {
			return fmt.Errorf("lock the catalog: %w", err)
		}
		stored, err := tx.storedCatalogArgs(ctx, kinds)
		if err != nil {
			return err
		}
		for i, k := range p.Kinds {
			if args[i], err = driverkit.MergeCatalogArgs(stored[k.Kind], k.Args, now, p.KeepSensitiveSince); err != nil {
				return fmt.Errorf("kind %q: %w", k.Kind, err)
			}
		}
		_, err = tx.q.exec(ctx, `INSERT INTO twice_kinds
			(kind, queue, strategy, fail_closed, max_attempts, timeout_us, args, schedules, limits, handler_name, node, last_seen)
		SELECT k.kind, k.queue, k.strategy, k.fail_closed, k.max_attempts, k.timeout_us,
			k.args::jsonb, k.schedules::jsonb, k.limits::jsonb, k.handler_name, $11, $12
		FROM unnest($1::text[], $2::text[], $3::text[], $4::boolean[], $5::bigint[], $6::bigint[], $7::text[], $8::text[], $9::text[], $10::text[])
			AS k(kind, queue, strategy, fail_closed, max_attempts, timeout_us, args, schedules, limits, handler_name)
		ON CONFLICT (kind) DO UPDATE SET queue = excluded.queue, strategy = excluded.strategy,
			fail_closed = excluded.fail_closed, max_attempts = excluded.max_attempts,
			timeout_us = excluded.timeout_us, args = excluded.args, schedules = excluded.schedules,
			limits = excluded.limits, handler_name = excluded.handler_name,
			node = excluded.node, last_seen = excluded.last_seen`,
			kinds, queues, strategies, failClosed, maxAttempts, timeouts, args, schedules, limits, handlers, p.Node, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("publish kind catalog of node %q: %w", p.Node, err)
	}
	return nil
}

// storedCatalogArgs reads the stored args column of each of kinds that
// the catalog holds, by kind.
func (e *executor) storedCatalogArgs(ctx context.Context, kinds []string) (map[string]string, error) {
	rs, err := e.q.query(ctx, `SELECT kind, args::text FROM twice_kinds WHERE kind = ANY($1::text[])`, kinds)
	if err != nil {
		return nil, fmt.Errorf("read the stored kinds: %w", err)
	}
	out, err := dbrows.Pairs[string, string](rs)
	if err != nil {
		return nil, fmt.Errorf("read the stored kinds: %w", err)
	}
	return out, nil
}

// CatalogList lists every catalogued kind ordered by kind's bytes
// (COLLATE "C", as ToggleList). The JSON columns come back as text, which
// pgx and database/sql both scan into a string.
func (e *executor) CatalogList(ctx context.Context, _ *twicestore.CatalogListParams) (*twicestore.CatalogListResult, error) {
	rs, err := e.q.query(ctx, `SELECT kind, queue, strategy, fail_closed, max_attempts, timeout_us,
		args::text, schedules::text, limits::text, handler_name, node, last_seen FROM twice_kinds ORDER BY kind COLLATE "C"`)
	if err != nil {
		return nil, fmt.Errorf("list kind catalog: %w", err)
	}
	kinds, err := driverkit.CollectList(rs, driverkit.KindInfoRow(driverkit.NativeTimes))
	if err != nil {
		return nil, fmt.Errorf("list kind catalog: %w", err)
	}
	return &twicestore.CatalogListResult{Kinds: kinds}, nil
}
