package twicepg

// Flow control: the fetch of limited kinds, and the usage report.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

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
const lockLimitsSQL = `SELECT count(pg_advisory_xact_lock(hashtextextended('twice.limit ' || current_schema() || ' ' || k, 0)))
FROM unnest($1::text[]) AS k`

// fetchLimitedSQL leases the due jobs of the limited kinds that no limit
// holds back, in fetch order, under the kinds' locks:
//
//   - cap is what each kind may still start: the global limit minus its
//     running jobs, the rate limit minus the starts in its window, and the
//     fetch's Limit, whichever is least;
//   - cand walks the fetch index in order and keeps the jobs whose kind has
//     room, whose key has fewer than PerKey jobs running or enqueued
//     before them and unfinished (which is both the per-key limit and its
//     enqueue order), and whose key has rate left; held-back jobs are
//     filtered here, so a throttled key at the head of the queue never
//     fills the LIMIT and starves the others;
//   - picked trims cand to each kind's cap and each key's rate left.
//
// A job of a key cand keeps has fewer than PerKey unfinished jobs of its
// key before it, so the jobs of one key it keeps are at most PerKey minus
// those running: the per-key limit holds within one fetch too. The lease
// re-checks state, as the plain fetch does: a job an operator cancelled
// meanwhile is dropped.
var fetchLimitedSQL = `WITH lim AS (
	SELECT * FROM unnest($6::text[], $7::int[], $8::int[], $9::int[], $10::timestamptz[], $11::int[], $12::timestamptz[])
		AS l(kind, global, per_key, rate, rate_since, key_rate, key_rate_since)
	WHERE NOT EXISTS (SELECT 1 FROM twice_queue_pauses AS qp
		WHERE qp.queue = $1 AND (qp.until IS NULL OR qp.until > $2))
),
cap AS (
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
	JOIN cap AS c ON c.kind = j.kind
	CROSS JOIN LATERAL (SELECT CASE WHEN c.key_rate > 0 AND j.concurrency_key <> '' THEN c.key_rate - (
		SELECT count(*) FROM twice_rate_starts AS s
		WHERE s.kind = j.kind AND s.key = j.concurrency_key AND s.at > c.key_rate_since) ELSE $3::int END AS key_cap) AS kr
	WHERE j.state = 'available' AND j.queue = $1 AND j.kind = ANY($6::text[]) AND j.run_at <= $2
		AND c.cap > 0 AND kr.key_cap > 0
		AND (c.per_key = 0 OR j.concurrency_key = '' OR (SELECT count(*) FROM (
			SELECT 1 FROM twice_jobs AS e
			WHERE e.kind = j.kind AND e.concurrency_key = j.concurrency_key
				AND e.concurrency_key <> '' AND e.state IN ('available', 'running')
				AND (e.id < j.id OR e.state = 'running')
			LIMIT c.per_key) AS x) < c.per_key)
	ORDER BY j.priority, j.run_at, j.id
	LIMIT $3::int
),
picked AS (
	SELECT id FROM (
		SELECT id, cap, key_cap,
			row_number() OVER (PARTITION BY kind ORDER BY priority, run_at, id) AS kn,
			row_number() OVER (PARTITION BY kind, ckey ORDER BY priority, run_at, id) AS keyn
		FROM cand) AS w
	WHERE kn <= cap AND keyn <= key_cap
)
UPDATE twice_jobs AS j
SET state = 'running', attempt = j.attempt + 1, epoch = j.epoch + 1, lease_until = $4, attempted_by = $5
FROM picked
WHERE j.id = picked.id AND j.state = 'available'
RETURNING j.concurrency_key, EXISTS (
	SELECT 1 FROM unnest($13::text[], $14::text[]) AS h(kind, handler)
	JOIN twice_markers AS m ON m.handler = h.handler
	WHERE h.kind = j.kind AND m.key = j.idempotency_key
), ` + jobColumns

// rateStartSQL records starts in the rate windows.
const rateStartSQL = `INSERT INTO twice_rate_starts (kind, key, at)
SELECT kind, key, $3 FROM unnest($1::text[], $2::text[]) AS t(kind, key)`

// ratePruneSQL deletes the starts no window of their kind can see any more.
const ratePruneSQL = `DELETE FROM twice_rate_starts AS s
USING unnest($1::text[], $2::timestamptz[]) AS w(kind, before)
WHERE s.kind = w.kind AND s.at <= w.before`

// dueLeftSQL tells whether due jobs of the limited kinds are left after
// the lease: the limits held them back.
const dueLeftSQL = `SELECT EXISTS (SELECT 1 FROM twice_jobs
	WHERE state = 'available' AND queue = $1 AND kind = ANY($2::text[]) AND run_at <= $3
		AND NOT EXISTS (SELECT 1 FROM twice_queue_pauses AS qp
			WHERE qp.queue = $1 AND (qp.until IS NULL OR qp.until > $3)))`

// fetchLimited leases jobs of the limited kinds in one transaction under
// their locks, then the plain kinds with what is left of the Limit, through
// the plain fetch (limited kinds first: their limits bound how much of the
// Limit they take, so they cannot starve the others).
func (e *executor) fetchLimited(ctx context.Context, p *twicestore.JobFetchParams, limited, plain []string) (*twicestore.JobFetchResult, error) {
	now := nowOr(p.Now)
	n := len(limited)
	var (
		global, perKey, rate, keyRate = make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
		rateSince, keyRateSince       = make([]time.Time, n), make([]time.Time, n)
		pruneKinds                    []string
		pruneBefore                   []time.Time
	)
	for i, k := range limited {
		l := p.Limits[k]
		global[i], perKey[i], rate[i], keyRate[i] = int32(l.Global), int32(l.PerKey), int32(l.Rate.Limit), int32(l.KeyRate.Limit)
		rateSince[i], keyRateSince[i] = now.Add(-l.Rate.Period), now.Add(-l.KeyRate.Period)
		if longest := max(l.Rate.Period, l.KeyRate.Period); longest > 0 {
			pruneKinds, pruneBefore = append(pruneKinds, k), append(pruneBefore, now.Add(-longest))
		}
	}
	peekKinds, peekHandlers := []string{}, []string{}
	for k, h := range p.Peek {
		peekKinds, peekHandlers = append(peekKinds, k), append(peekHandlers, h)
	}
	type fetched struct {
		job       *twicetype.JobRow
		processed bool
	}
	var (
		out       []fetched
		throttled bool
	)
	err := e.inTx(ctx, func(tx *executor) error {
		if _, err := tx.q.exec(ctx, lockLimitsSQL, limited); err != nil {
			return fmt.Errorf("lock limited kinds: %w", err)
		}
		rs, err := tx.q.query(ctx, fetchLimitedSQL, p.Queue, now, p.Limit, p.LeaseUntil, p.Node,
			limited, global, perKey, rate, rateSince, keyRate, keyRateSince, peekKinds, peekHandlers)
		if err != nil {
			return err
		}
		var startKinds, startKeys []string
		for rs.Next() {
			var (
				f    fetched
				ckey string
			)
			if f.job, err = scanJob(rs, &ckey, &f.processed); err != nil {
				rs.Close()
				return err
			}
			out = append(out, f)
			l := p.Limits[f.job.Kind]
			if l.Rate.Limit > 0 {
				startKinds, startKeys = append(startKinds, f.job.Kind), append(startKeys, "")
			}
			if l.KeyRate.Limit > 0 && ckey != "" {
				startKinds, startKeys = append(startKinds, f.job.Kind), append(startKeys, ckey)
			}
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return err
		}
		if len(startKinds) > 0 {
			if _, err := tx.q.exec(ctx, rateStartSQL, startKinds, startKeys, now); err != nil {
				return fmt.Errorf("record rate-limited starts: %w", err)
			}
		}
		if len(pruneKinds) > 0 {
			if _, err := tx.q.exec(ctx, ratePruneSQL, pruneKinds, pruneBefore); err != nil {
				return fmt.Errorf("prune rate windows: %w", err)
			}
		}
		if len(out) < p.Limit {
			if err := tx.q.queryRow(ctx, dueLeftSQL, p.Queue, limited, now).Scan(&throttled); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("fetch queue %q: %w", p.Queue, err)
	}
	res := &twicestore.JobFetchResult{Throttled: throttled}
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
					AND (e.id < j.id OR e.state = 'running')
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
			now.Add(-l.KeyRate.Period), now.Add(-l.Rate.Period)).
			Scan(&u.Running, &u.Due, &eligible, &u.Keys, &u.BusyKeys, &u.RateUsed)
		if err != nil {
			return nil, fmt.Errorf("limit usage of kind %q: %w", kind, err)
		}
		if l.Rate.Limit == 0 {
			u.RateUsed = 0
		}
		u.Throttled = twicestore.Throttled(l, u.Running, u.RateUsed, u.Due, eligible)
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
