package twicepg

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// CatalogPublish upserts the node's kinds in one statement: every field of
// a kind is replaced by this publish, whichever node published it before,
// so the last publish of a kind wins. The kinds go in as parallel arrays,
// one round trip whatever their number.
func (e *executor) CatalogPublish(ctx context.Context, p *twicestore.CatalogPublishParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if len(p.Kinds) == 0 {
		return nil
	}
	n := len(p.Kinds)
	var (
		kinds, queues, strategies = make([]string, n), make([]string, n), make([]string, n)
		failClosed                = make([]bool, n)
		maxAttempts               = make([]int64, n)
		timeouts                  = make([]int64, n)
		args, schedules           = make([]string, n), make([]string, n)
	)
	for i, k := range p.Kinds {
		kinds[i], queues[i], strategies[i] = k.Kind, k.Queue, k.Strategy
		failClosed[i], maxAttempts[i], timeouts[i] = k.FailClosed, int64(k.MaxAttempts), k.Timeout.Microseconds()
		args[i], schedules[i] = catalogJSON(k)
	}
	_, err := e.q.exec(ctx, `INSERT INTO twice_kinds
			(kind, queue, strategy, fail_closed, max_attempts, timeout_us, args, schedules, node, last_seen)
		SELECT k.kind, k.queue, k.strategy, k.fail_closed, k.max_attempts, k.timeout_us,
			k.args::jsonb, k.schedules::jsonb, $9, $10
		FROM unnest($1::text[], $2::text[], $3::text[], $4::boolean[], $5::bigint[], $6::bigint[], $7::text[], $8::text[])
			AS k(kind, queue, strategy, fail_closed, max_attempts, timeout_us, args, schedules)
		ON CONFLICT (kind) DO UPDATE SET queue = excluded.queue, strategy = excluded.strategy,
			fail_closed = excluded.fail_closed, max_attempts = excluded.max_attempts,
			timeout_us = excluded.timeout_us, args = excluded.args, schedules = excluded.schedules,
			node = excluded.node, last_seen = excluded.last_seen`,
		kinds, queues, strategies, failClosed, maxAttempts, timeouts, args, schedules, p.Node, nowOr(p.Now))
	if err != nil {
		return fmt.Errorf("publish kind catalog of node %q: %w", p.Node, err)
	}
	return nil
}

// catalogJSON encodes a kind's args fields and schedules for their
// columns; none is "[]". The twicetype structs' json tags are the stored
// form, shared with the SQLite driver.
func catalogJSON(k twicetype.KindInfo) (args, schedules string) {
	a, s := k.Args, k.Schedules
	if a == nil {
		a = []twicetype.ArgField{}
	}
	if s == nil {
		s = []twicetype.KindSchedule{}
	}
	ab, err := json.Marshal(a)
	if err != nil {
		panic(err) // structs of strings and booleans always encode
	}
	sb, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(ab), string(sb)
}

// CatalogList lists every catalogued kind ordered by kind's bytes
// (COLLATE "C", as ToggleList). The JSON columns come back as text, which
// pgx and database/sql both scan into a string.
func (e *executor) CatalogList(ctx context.Context, _ *twicestore.CatalogListParams) (*twicestore.CatalogListResult, error) {
	rs, err := e.q.query(ctx, `SELECT kind, queue, strategy, fail_closed, max_attempts, timeout_us,
		args::text, schedules::text, node, last_seen FROM twice_kinds ORDER BY kind COLLATE "C"`)
	if err != nil {
		return nil, fmt.Errorf("list kind catalog: %w", err)
	}
	defer rs.Close()
	res := &twicestore.CatalogListResult{Kinds: []twicetype.KindInfo{}}
	for rs.Next() {
		var (
			k               twicetype.KindInfo
			timeout         int64
			args, schedules string
		)
		if err := rs.Scan(&k.Kind, &k.Queue, &k.Strategy, &k.FailClosed, &k.MaxAttempts, &timeout,
			&args, &schedules, &k.Node, &k.LastSeen); err != nil {
			return nil, fmt.Errorf("list kind catalog: %w", err)
		}
		if err := json.Unmarshal([]byte(args), &k.Args); err != nil {
			return nil, fmt.Errorf("list kind catalog: kind %q args: %w", k.Kind, err)
		}
		if err := json.Unmarshal([]byte(schedules), &k.Schedules); err != nil {
			return nil, fmt.Errorf("list kind catalog: kind %q schedules: %w", k.Kind, err)
		}
		k.Timeout = time.Duration(timeout) * time.Microsecond
		k.LastSeen = k.LastSeen.UTC()
		res.Kinds = append(res.Kinds, k)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("list kind catalog: %w", err)
	}
	return res, nil
}
