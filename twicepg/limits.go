package twicepg

// Flow control: the fetch of limited kinds, and the usage report.

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// lockLimitsSQL takes the transaction-scoped advisory lock of each limited
// kind, in the order given (sorted, so two fetches never wait on each other
// in a cycle). Every fetch that may lease a limited kind's job holds the
// kind's lock until it commits, so fetches of one kind run one after the
// other on every node, and each counts the running jobs and the rate
// starts that the one before it committed: the statement after the lock
// takes a fresh snapshot (READ COMMITTED), and a transaction's commit is
// visible before its locks are released. Only leases add to the usage, and
// only under the lock; finishes, rescues and cancels lower it, and a fetch
// that sees a lower usage late only leases less. The schema is in the key
// because advisory locks are per database, not per schema.
//
// It also sets plan_cache_mode to force_generic_plan for the rest of the
// transaction (set_config's is_local), so the fetch after it runs its
// cached generic plan. Left to choose, PostgreSQL custom-plans
// fetchLimitedSQL at every execution (the generic plan's estimate never
// beats the custom ones), which took ~4 ms of planning for ~1 ms of
// execution; the generic plan is the same plan (index walks driven by the
// fetch index), planned once per connection.
const lockLimitsSQL = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true),
	(SELECT count(pg_advisory_xact_lock(hashtextextended('twice.limit ' || current_schema() || ' ' || k, 0)))
		FROM unnest($1::text[]) AS k)`

// fetchLimitedSQL leases the due jobs of the limited kinds that no limit
// holds back, in fetch order, under the kinds' locks:
//
//   - cap is what each kind may still start: the global limit minus its
//     running jobs, the rate limit minus the starts in its window, and the
//     fetch's Limit, whichever is least;
//   - cand walks the fetch index in order and keeps the jobs whose kind has
//     room, whose key has fewer than PerKey jobs running or enqueued
//     before them and unfinished (which is both the per-key limit and its
//     enqueue order; with skip_retries an earlier job that ran before and
//     is not due, a retry, does not count), and whose key has rate left; held-back jobs are
//     filtered here, so a throttled key at the head of the queue never
//     fills the LIMIT and starves the others. Its kind's cap row is
//     joined LATERAL and OFFSET 0 (not flattened), which keeps the plan a
//     nested loop driven by the fetch index in fetch order, stopping at
//     the LIMIT: the plan is generic (see lockLimitsSQL), and with a plain
//     join and the estimates of a fresh table it hashed the join and
//     sorted, checking the key of every due job at every fetch;
//   - picked trims cand to each kind's cap and each key's rate left;
//   - leased moves them to running, re-checking state as the plain fetch
//     does (a job an operator cancelled meanwhile is dropped), and peeks
//     their markers;
//   - starts leaves their starts in the rate windows to stampStartsSQL, in
//     the transaction's twice.rate_starts setting under the fetch's token
//     $18, and pruned deletes the starts no window can see any more (when
//     $17: one fetch in driverkit.RatePruneOneIn).
//
// lim reads the clock the windows are judged at once, after the lock:
// the database's (or $2, a Now ahead of it: tests), the clock the starts
// are stamped with.
//
// A job of a key cand keeps has fewer than PerKey unfinished jobs of its
// key before it, so the jobs of one key it keeps are at most PerKey minus
// those running: the per-key limit holds within one fetch too.
var fetchLimitedSQL = `WITH lim AS MATERIALIZED (
	SELECT l.*, c.at - l.rate_us * interval '1 microsecond' AS rate_since,
		c.at - l.key_rate_us * interval '1 microsecond' AS key_rate_since
	FROM unnest($6::text[], $7::int[], $8::int[], $9::int[], $10::bigint[], $11::int[],
		$12::bigint[], $15::timestamptz[], $16::boolean[])
		AS l(kind, global, per_key, rate, rate_us, key_rate, key_rate_us, prune_before, skip_retries)
	CROSS JOIN (SELECT greatest($2::timestamptz, clock_timestamp()) AS at) AS c
	WHERE NOT EXISTS (SELECT 1 FROM twice_queue_pauses AS qp
		WHERE qp.queue = $1 AND (qp.until IS NULL OR qp.until > $2))
),
cap AS MATERIALIZED (
	SELECT l.*, LEAST($3::int,
		CASE WHEN l.global > 0 THEN l.global - (SELECT count(*) FROM twice_jobs AS r
			WHERE r.state = 'running' AND r.kind = l.kind) END,
		CASE WHEN l.rate > 0 THEN l.rate - (SELECT count(*) FROM twice_rate_starts AS s
			WHERE s.kind = l.kind AND s.key = '' AND s.at > l.rate_since) END) AS cap
	FROM lim AS l
),
cand AS (
	SELECT j.id, j.kind, j.concurrency_key AS ckey, j.priority, j.run_at, c.cap, kr.key_cap
	FROM twice_jobs AS j
	CROSS JOIN LATERAL (SELECT * FROM cap WHERE cap.kind = j.kind OFFSET 0) AS c
	CROSS JOIN LATERAL (SELECT CASE WHEN c.key_rate > 0 AND j.concurrency_key <> '' THEN c.key_rate - (
		SELECT count(*) FROM twice_rate_starts AS s
		WHERE s.kind = j.kind AND s.key = j.concurrency_key AND s.at > c.key_rate_since) ELSE $3::int END AS key_cap) AS kr
	WHERE j.state = 'available' AND j.queue = $1 AND j.kind = ANY($6::text[]) AND j.run_at <= $2
		AND c.cap > 0 AND kr.key_cap > 0
		AND (c.per_key = 0 OR j.concurrency_key = '' OR (SELECT count(*) FROM (
			SELECT 1 FROM twice_jobs AS e
			WHERE e.kind = j.kind AND e.concurrency_key = j.concurrency_key
				AND e.concurrency_key <> '' AND e.state IN ('available', 'running')
				AND (e.state = 'running' OR e.id < j.id
					AND NOT (c.skip_retries AND e.epoch > 0 AND e.run_at > $2))
			LIMIT c.per_key) AS x) < c.per_key)
	ORDER BY j.priority, j.run_at, j.id
	LIMIT $3::int
	FOR UPDATE OF j SKIP LOCKED
),
picked AS (
	SELECT id FROM (
		SELECT id, cap, key_cap,
			row_number() OVER (PARTITION BY kind ORDER BY priority, run_at, id) AS kn,
			row_number() OVER (PARTITION BY kind, ckey ORDER BY priority, run_at, id) AS keyn
		FROM cand) AS w
	WHERE kn <= cap AND keyn <= key_cap
),
leased AS (
	UPDATE twice_jobs AS j
	SET state = 'running', attempt = j.attempt + 1, epoch = j.epoch + 1, lease_until = $4, attempted_by = $5,
		gen = twice_jobs_gen()
	WHERE j.id = ANY(ARRAY(SELECT id FROM picked)) AND j.state = 'available'
	RETURNING j.*, EXISTS (
		SELECT 1 FROM unnest($13::text[], $14::text[]) AS h(kind, handler)
		JOIN twice_markers AS m ON m.handler = h.handler
		WHERE h.kind = j.kind AND m.key = j.idempotency_key
	) AS processed
),
starts AS (
	SELECT set_config('twice.rate_starts', json_build_array($18::bigint,
		coalesce(json_agg(json_build_array(s.kind, s.key)), '[]'::json))::text, true)
	FROM (SELECT l.kind, '' AS key FROM leased JOIN lim AS l ON l.kind = leased.kind WHERE l.rate > 0
		UNION ALL
		SELECT l.kind, leased.concurrency_key FROM leased JOIN lim AS l ON l.kind = leased.kind
		WHERE l.key_rate > 0 AND leased.concurrency_key <> '') AS s
),
pruned AS (
	DELETE FROM twice_rate_starts AS s USING lim AS l
	WHERE $17::boolean AND s.kind = l.kind AND (l.rate > 0 OR l.key_rate > 0) AND s.at <= l.prune_before
)
SELECT leased.processed, ` + jobCols("leased") + ` FROM leased CROSS JOIN starts`

// stampStartsSQL records the starts fetchLimitedSQL left in the
// transaction's twice.rate_starts setting, in the rate windows, stamped
// with the database's clock (or $2, a Now ahead of it: tests) as this
// statement runs: after the statement that turned the jobs running has
// ended, under the kinds' locks. The stamp is never earlier than any
// moment that statement could be observed at (its row updates, its
// triggers, before or after), and the next fetch of the kind counts its
// window from a clock read under the lock once this transaction has
// committed: so no window of length Period, on the database's clock, holds
// more than Limit moments at which jobs turned running. Stamped with the
// fetch's Now, read before its wait for the lock (up to ~100 ms with 3
// nodes), a start left the window early, and 90-95 jobs of a 50/s kind
// turned running within one second (TestClusterRateLimit); stamped in the
// leasing statement itself, the stamp preceded the end of that statement
// (where its AFTER triggers fire) by up to 23 ms, and 60-70 did. $1 is the
// fetch's token: a setting left by another fetch earlier in the same
// transaction (an executor on a caller's transaction) is not stamped
// twice.
const stampStartsSQL = `INSERT INTO twice_rate_starts (kind, key, at)
SELECT s.v->>0, s.v->>1, greatest($2::timestamptz, clock_timestamp())
FROM (SELECT nullif(current_setting('twice.rate_starts', true), '')::json AS v) AS stash
CROSS JOIN LATERAL json_array_elements(CASE WHEN (stash.v->>0)::bigint = $1
	THEN stash.v->1 ELSE '[]'::json END) AS s(v)`

// fetchGlobalSQL is fetchLimitedSQL for the common case of one kind with
// only a global limit: the plain fetch, its LIMIT cut to the slots left.
// It spares the per-row key and rate checks and the window functions.
// The update finds the picked rows through an array of their ids: the
// planner cannot estimate a LIMIT that is an expression (it guesses a
// tenth of the table), and joined to picked it hashed a scan of the whole
// table at every fetch.
var fetchGlobalSQL = `WITH picked AS (
	SELECT id FROM twice_jobs
	WHERE state = 'available' AND queue = $1 AND kind = $6 AND run_at <= $2
		AND NOT EXISTS (SELECT 1 FROM twice_queue_pauses AS qp
			WHERE qp.queue = $1 AND (qp.until IS NULL OR qp.until > $2))
	ORDER BY priority, run_at, id
	LIMIT GREATEST(0, LEAST($3::int, $7::int - (SELECT count(*) FROM twice_jobs AS r
		WHERE r.state = 'running' AND r.kind = $6)))
	FOR UPDATE SKIP LOCKED
)
UPDATE twice_jobs AS j
SET state = 'running', attempt = j.attempt + 1, epoch = j.epoch + 1, lease_until = $4, attempted_by = $5,
	gen = twice_jobs_gen()
WHERE j.id = ANY(ARRAY(SELECT id FROM picked)) AND j.state IN ('available', 'running')
RETURNING EXISTS (
	SELECT 1 FROM unnest($8::text[], $9::text[]) AS h(kind, handler)
	JOIN twice_markers AS m ON m.handler = h.handler
	WHERE h.kind = j.kind AND m.key = j.idempotency_key
), ` + jobColumns

// dueLeftSQL tells whether due jobs of the limited kinds are left after
// the lease: the limits held them back.
const dueLeftSQL = `SELECT EXISTS (SELECT 1 FROM twice_jobs
	WHERE state = 'available' AND queue = $1 AND kind = ANY($2::text[]) AND run_at <= $3
		AND NOT EXISTS (SELECT 1 FROM twice_queue_pauses AS qp
			WHERE qp.queue = $1 AND (qp.until IS NULL OR qp.until > $3)))`

// retryAtSQL finds when the kind-wide rate windows next free a start: the
// oldest start in each window plus its period. NULL when no window holds a
// start.
const retryAtSQL = `SELECT min(s.at + w.period_us * interval '1 microsecond')
FROM unnest($1::text[], $2::bigint[], $3::timestamptz[]) AS w(kind, period_us, since)
JOIN twice_rate_starts AS s ON s.kind = w.kind AND s.key = '' AND s.at > w.since`

// batcher is what pgxpool.Pool and pgx.Tx offer to pipeline statements.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// batcher returns the executor's pgx pool or transaction, which can
// pipeline statements; nil through database/sql.
func (e *executor) batcher() batcher {
	if pq, ok := e.q.(pgxQuerier); ok {
		if b, ok := pq.c.(batcher); ok {
			return b
		}
	}
	return nil
}

// fetchLimited leases jobs of the limited kinds, then the plain kinds with
// what is left of the Limit, through the plain fetch (limited kinds first:
// their limits bound how much of the Limit they take, so they cannot
// starve the others).
//
// The lock, the lease and (with a rate limit) the stamp of the starts are
// statements of one transaction. On a pgx pool or transaction they go as
// one pipeline: one round trip, and (on the pool) one implicit
// transaction, which holds the locks to its end like an explicit one;
// each statement still takes its own snapshot, so the lease sees what the
// lock's previous holder committed. Through database/sql they go one by
// one in a transaction.
//
// The throttle check (and the rate window's next free start) comes after
// the transaction, and only for a fetch that leased less than its Limit: a
// full fetch held nothing back that it could have leased, and its caller
// fetches again at once. It is a hint that may read a later state, as on
// SQLite. Pipelined with every fetch it cost a burn-down with a limit that
// never binds ~0.8 ms of server time per fetch (pg_stat_statements),
// walking the fetch index's dead head.
func (e *executor) fetchLimited(ctx context.Context, p *twicestore.JobFetchParams, limited, plain []string) (*twicestore.JobFetchResult, error) {
	now := nowOr(p.Now)
	n := len(limited)
	var (
		global, perKey, rate, keyRate = make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
		ratePeriod, keyRatePeriod     = make([]int64, n), make([]int64, n)
		rateSince, pruneBefore        = make([]time.Time, n), make([]time.Time, n)
		skipRetries                   = make([]bool, n)
	)
	for i, k := range limited {
		l := p.Limits[k]
		global[i], perKey[i], rate[i], keyRate[i] = int32(l.Global), int32(l.PerKey), int32(l.Rate.Limit), int32(l.KeyRate.Limit)
		skipRetries[i] = l.KeyOrderSkipsRetries
		ratePeriod[i], keyRatePeriod[i] = l.Rate.Period.Microseconds(), l.KeyRate.Period.Microseconds()
		rateSince[i] = now.Add(-l.Rate.Period)
		pruneBefore[i] = now.Add(-max(l.Rate.Period, l.KeyRate.Period) - driverkit.RateStartsKept)
	}
	peekKinds, peekHandlers := []string{}, []string{}
	for k, h := range p.Peek {
		peekKinds, peekHandlers = append(peekKinds, k), append(peekHandlers, h)
	}
	token := rand.Int64()
	query, fetchArgs := fetchLimitedSQL, []any{p.Queue, now, p.Limit, p.LeaseUntil, p.Node,
		limited, global, perKey, rate, ratePeriod, keyRate, keyRatePeriod, peekKinds, peekHandlers, pruneBefore, skipRetries,
		driverkit.PruneRateStarts(), token}
	stampArgs := []any{token, now}
	if l := p.Limits[limited[0]]; n == 1 && l == (twicestore.KindLimit{Global: l.Global}) {
		query, fetchArgs, stampArgs = fetchGlobalSQL, []any{p.Queue, now, p.Limit, p.LeaseUntil, p.Node,
			limited[0], l.Global, peekKinds, peekHandlers}, nil
	}
	dueArgs := []any{p.Queue, limited, now}
	var rateKinds []string
	var ratePeriods []int64
	var rateSinces []time.Time
	for i, k := range limited {
		if r := p.Limits[k].Rate; r.Limit > 0 {
			rateKinds, ratePeriods, rateSinces = append(rateKinds, k), append(ratePeriods, r.Period.Microseconds()), append(rateSinces, rateSince[i])
		}
	}
	retryArgs := []any{rateKinds, ratePeriods, rateSinces}
	var retryAt *time.Time

	type fetched struct {
		job       *twicetype.JobRow
		processed bool
	}
	var (
		out       []fetched
		throttled bool
	)
	scan := func(rs rows) error {
		var processed bool
		scanner := newJobScanner(&processed)
		for row, err := range dbrows.Iter(rs) {
			if err != nil {
				return err
			}
			j, err := scanner.scan(row)
			if err != nil {
				return err
			}
			out = append(out, fetched{job: j, processed: processed})
		}
		return nil
	}
	var err error
	if b := e.batcher(); b != nil {
		err = func() error {
			batch := &pgx.Batch{}
			batch.Queue(lockLimitsSQL, limited)
			batch.Queue(query, fetchArgs...)
			if stampArgs != nil {
				batch.Queue(stampStartsSQL, stampArgs...)
			}
			br := b.SendBatch(ctx, batch)
			defer func() { _ = br.Close() }() // the error, if any, is the last one returned
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("lock limited kinds: %w", err)
			}
			rs, err := br.Query() //nolint:rowserrcheck // scan checks rs.Err()
			if err != nil {
				return err
			}
			if err := scan(rs); err != nil {
				return err
			}
			if stampArgs != nil {
				if _, err := br.Exec(); err != nil {
					return fmt.Errorf("record rate-limited starts: %w", err)
				}
			}
			return br.Close()
		}()
	} else {
		err = e.inTx(ctx, func(tx *executor) error {
			if _, err := tx.q.exec(ctx, lockLimitsSQL, limited); err != nil {
				return fmt.Errorf("lock limited kinds: %w", err)
			}
			rs, err := tx.q.query(ctx, query, fetchArgs...) //nolint:rowserrcheck // scan checks rs.Err()
			if err != nil {
				return err
			}
			if err := scan(rs); err != nil {
				return err
			}
			if stampArgs != nil {
				if _, err := tx.q.exec(ctx, stampStartsSQL, stampArgs...); err != nil {
					return fmt.Errorf("record rate-limited starts: %w", err)
				}
			}
			return nil
		})
	}
	if err == nil && len(out) < p.Limit {
		err = e.q.queryRow(ctx, dueLeftSQL, dueArgs...).Scan(&throttled)
		if err == nil && throttled && len(rateKinds) > 0 {
			err = e.q.queryRow(ctx, retryAtSQL, retryArgs...).Scan(&retryAt)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("fetch queue %q: %w", p.Queue, err)
	}
	res := &twicestore.JobFetchResult{Throttled: throttled}
	if throttled && retryAt != nil {
		res.RetryAt = retryAt.UTC()
	}
	if left := p.Limit - len(out); left > 0 && len(plain) > 0 {
		rest := *p
		rest.Kinds, rest.Limit, rest.Limits = plain, left, nil
		more, err := e.JobFetch(ctx, &rest)
		if err != nil {
			return nil, err
		}
		for i, j := range more.Jobs {
			out = append(out, fetched{job: j, processed: more.Processed[i]})
		}
	}
	slices.SortFunc(out, func(x, y fetched) int {
		a, b := x.job, y.job
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), a.RunAt.Compare(b.RunAt), cmp.Compare(a.ID, b.ID))
	})
	res.Jobs, res.Processed = make([]*twicetype.JobRow, len(out)), make([]bool, len(out))
	for i, f := range out {
		res.Jobs[i], res.Processed[i] = f.job, f.processed
	}
	return res, nil
}

// limitUsageSQL reports one limited kind's usage. eligible counts the due
// jobs the fetch's key rules would let start (ignoring the kind's cap,
// which the caller applies): the rest of the due jobs are throttled.
const limitUsageSQL = `SELECT
	(SELECT count(*) FROM twice_jobs WHERE state = 'running' AND kind = $1),
	(SELECT count(*) FROM twice_jobs WHERE state = 'available' AND kind = $1 AND run_at <= $2),
	(SELECT count(*) FROM twice_jobs AS j
		WHERE j.state = 'available' AND j.kind = $1 AND j.run_at <= $2
			AND ($3::int = 0 OR j.concurrency_key = '' OR (SELECT count(*) FROM (
				SELECT 1 FROM twice_jobs AS e
				WHERE e.kind = j.kind AND e.concurrency_key = j.concurrency_key
					AND e.concurrency_key <> '' AND e.state IN ('available', 'running')
					AND (e.state = 'running' OR e.id < j.id
						AND NOT ($7::boolean AND e.epoch > 0 AND e.run_at > $2))
				LIMIT $3::int) AS x) < $3::int)
			AND ($4::int = 0 OR j.concurrency_key = '' OR (SELECT count(*) FROM twice_rate_starts AS s
				WHERE s.kind = j.kind AND s.key = j.concurrency_key AND s.at > $5) < $4::int)),
	(SELECT count(DISTINCT concurrency_key) FROM twice_jobs
		WHERE kind = $1 AND concurrency_key <> '' AND state IN ('available', 'running')),
	(SELECT count(DISTINCT concurrency_key) FROM twice_jobs
		WHERE kind = $1 AND concurrency_key <> '' AND state = 'running'),
	(SELECT count(*) FROM twice_rate_starts WHERE kind = $1 AND key = '' AND at > $6)`

// LimitList reports the usage of each limited kind, one statement per
// kind (an operator's query: a handful of kinds).
func (e *executor) LimitList(ctx context.Context, p *twicestore.LimitListParams) (*twicestore.LimitListResult, error) {
	now := nowOr(p.Now)
	res := &twicestore.LimitListResult{}
	for _, kind := range sortedKinds(p.Limits) {
		l := p.Limits[kind]
		u := twicestore.LimitUsage{Kind: kind, Limit: l}
		var eligible int
		err := e.q.queryRow(ctx, limitUsageSQL, kind, now, l.PerKey, l.KeyRate.Limit,
			now.Add(-l.KeyRate.Period), now.Add(-l.Rate.Period), l.KeyOrderSkipsRetries).
			Scan(&u.Running, &u.Due, &eligible, &u.Keys, &u.BusyKeys, &u.RateUsed)
		if err != nil {
			return nil, fmt.Errorf("limit usage of kind %q: %w", kind, err)
		}
		driverkit.SettleUsage(&u, eligible)
		res.Kinds = append(res.Kinds, u)
	}
	return res, nil
}

// sortedKinds lists the kinds of limits, sorted.
func sortedKinds(limits map[string]twicestore.KindLimit) []string {
	kinds := make([]string, 0, len(limits))
	for k := range limits {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	return kinds
}
