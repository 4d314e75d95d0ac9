package twicesqlite

// Flow control: the fetch of limited kinds, and the usage report.

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// fetchLimitedSQL leases the due jobs of the limited kinds that no limit
// holds back, in fetch order. SQLite runs one writer at a time and this
// statement (with the rate bookkeeping after it, in the same transaction)
// is a write, so no other fetch runs between its counts and its lease: the
// counts are exact.
//
//   - cap is what each kind may still start: the global limit minus its
//     running jobs, the rate limit minus the starts in its window, and the
//     fetch's Limit, whichever is least;
//   - cand walks the fetch index in order and keeps the jobs whose kind has
//     room, whose key has fewer than PerKey jobs running or enqueued
//     before them and unfinished (both the per-key limit and its enqueue
//     order), and whose key has rate left, so a throttled key at the head
//     of the queue never fills the LIMIT;
//   - picked trims cand to each kind's cap and each key's rate left.
//
// ?6 is a JSON array of [kind, global, per_key, rate, rate_since,
// key_rate, key_rate_since, skip_retries], times in unix microseconds.
// With skip_retries an earlier job of the key that ran before and is not
// due (a retry) does not hold the later ones back.
const fetchLimitedSQL = `WITH ` + limitCapsCTE + `,
cand AS (
	SELECT * FROM (
		SELECT j.id, j.kind, j.concurrency_key AS ckey, j.priority, j.run_at, c.cap,
			CASE WHEN c.key_rate > 0 AND j.concurrency_key <> '' THEN c.key_rate - (
				SELECT count(*) FROM twice_rate_starts AS s
				WHERE s.kind = j.kind AND s.key = j.concurrency_key AND s.at > c.key_rate_since) ELSE ?3 END AS key_cap
		FROM twice_jobs AS j INDEXED BY twice_jobs_fetch
		JOIN cap AS c ON c.kind = j.kind
		WHERE j.state = 'available' AND j.queue = ?1 AND j.run_at <= ?2 AND c.cap > 0
			AND (c.per_key = 0 OR j.concurrency_key = '' OR (SELECT count(*) FROM twice_jobs AS e
				WHERE e.kind = j.kind AND e.concurrency_key = j.concurrency_key
					AND e.concurrency_key <> '' AND e.state IN ('available', 'running')
					AND (e.state = 'running' OR e.id < j.id
						AND NOT (c.skip_retries AND e.epoch > 0 AND e.run_at > ?2))) < c.per_key)
		ORDER BY j.priority, j.run_at, j.id
	) WHERE key_cap > 0
	ORDER BY priority, run_at, id
	LIMIT ?3
),
picked AS (
	SELECT id FROM (
		SELECT id, cap, key_cap,
			row_number() OVER (PARTITION BY kind ORDER BY priority, run_at, id) AS kn,
			row_number() OVER (PARTITION BY kind, ckey ORDER BY priority, run_at, id) AS keyn
		FROM cand)
	WHERE kn <= cap AND keyn <= key_cap
)
UPDATE twice_jobs
SET state = 'running', attempt = attempt + 1, epoch = epoch + 1, lease_until = ?4, attempted_by = ?5
WHERE id IN (SELECT id FROM picked) AND state = 'available'
RETURNING ` + jobColumns + `, concurrency_key`

// limitCapsCTE computes lim (the kinds' limits, none when the queue is
// paused) and cap (what each kind may still start) for fetchLimitedSQL
// and limitCapsSQL.
const limitCapsCTE = `lim AS (
	SELECT json_extract(value, '$[0]') AS kind, json_extract(value, '$[1]') AS global,
		json_extract(value, '$[2]') AS per_key, json_extract(value, '$[3]') AS rate,
		json_extract(value, '$[4]') AS rate_since, json_extract(value, '$[5]') AS key_rate,
		json_extract(value, '$[6]') AS key_rate_since, json_extract(value, '$[7]') AS skip_retries
	FROM json_each(?6)
	WHERE NOT EXISTS (SELECT 1 FROM twice_queue_pauses AS qp
		WHERE qp.queue = ?1 AND (qp.until IS NULL OR qp.until > ?2))
),
cap AS (
	SELECT l.*, min(?3,
		CASE WHEN l.global > 0 THEN l.global - (SELECT count(*) FROM twice_jobs AS r
			WHERE r.state = 'running' AND r.kind = l.kind) ELSE ?3 END,
		CASE WHEN l.rate > 0 THEN l.rate - (SELECT count(*) FROM twice_rate_starts AS s
			WHERE s.kind = l.kind AND s.key = '' AND s.at > l.rate_since) ELSE ?3 END) AS cap
	FROM lim AS l
)`

// limitCapsSQL counts the kinds with room left, before the lease and in
// its transaction. When none has, the fetch leases nothing without running
// fetchLimitedSQL: that statement keeps a candidate only when its kind has
// room, so with every kind at its limit it walked every due job of the
// queue in the fetch index and leased none, holding the write lock all
// along. With 10,000 jobs queued under a 500/s rate limit that took half a
// second, so a window's freed starts waited for it and the limit reached
// only 0.45-0.79 of itself in BenchmarkLimits (0.93-0.95 without it).
const limitCapsSQL = `WITH ` + limitCapsCTE + `
SELECT count(*) FROM cap WHERE cap > 0`

// fetchGlobalSQL is fetchLimitedSQL for the common case of one kind with
// only a global limit: the plain fetch, its LIMIT cut to the slots left.
// It spares the per-row key and rate checks and the window functions.
const fetchGlobalSQL = `UPDATE twice_jobs
SET state = 'running', attempt = attempt + 1, epoch = epoch + 1, lease_until = ?4, attempted_by = ?5
WHERE id IN (
	SELECT id FROM twice_jobs INDEXED BY twice_jobs_fetch
	WHERE state = 'available' AND queue = ?1 AND run_at <= ?2 AND kind = ?6
	  AND NOT EXISTS (SELECT 1 FROM twice_queue_pauses AS qp
		WHERE qp.queue = ?1 AND (qp.until IS NULL OR qp.until > ?2))
	ORDER BY priority, run_at, id
	LIMIT max(0, min(?3, ?7 - (SELECT count(*) FROM twice_jobs WHERE state = 'running' AND kind = ?6)))
) AND state = 'available'
RETURNING ` + jobColumns + `, concurrency_key`

// rateStartSQL records starts in the rate windows: ?1 is a JSON array of
// [kind, key] pairs.
const rateStartSQL = `INSERT INTO twice_rate_starts (kind, key, at)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), ?2 FROM json_each(?1)`

// ratePruneSQL deletes the starts no window of their kind can see any more:
// ?1 is a JSON array of [kind, before] pairs.
// It walks the window index from each kind, not the whole table with a
// JSON lookup per row.
const ratePruneSQL = `DELETE FROM twice_rate_starts
WHERE rowid IN (SELECT s.rowid FROM json_each(?1) AS w
	JOIN twice_rate_starts AS s ON s.kind = json_extract(w.value, '$[0]')
		AND s.at <= json_extract(w.value, '$[1]'))`

// dueLeftSQL tells whether due jobs of the limited kinds are left after
// the lease: the limits held them back.
const dueLeftSQL = `SELECT EXISTS (SELECT 1 FROM twice_jobs
	WHERE state = 'available' AND queue = ?1 AND kind IN (SELECT value FROM json_each(?2)) AND run_at <= ?3
		AND NOT EXISTS (SELECT 1 FROM twice_queue_pauses AS qp
			WHERE qp.queue = ?1 AND (qp.until IS NULL OR qp.until > ?3)))`

// retryAtSQL finds when the kind-wide rate windows next free a start: the
// oldest start in each window plus its period. ?1 is a JSON array of
// [kind, period, since], in microseconds. NULL when no window holds one.
const retryAtSQL = `SELECT min(s.at + json_extract(w.value, '$[1]'))
FROM json_each(?1) AS w
JOIN twice_rate_starts AS s ON s.kind = json_extract(w.value, '$[0]') AND s.key = ''
	AND s.at > json_extract(w.value, '$[2]')`

// keyScanner scans a job row followed by its concurrency key.
type keyScanner struct {
	r   rowScanner
	key *string
}

func (k keyScanner) Scan(dest ...any) error { return k.r.Scan(append(dest, k.key)...) }

// fetchRows leases the jobs of a fetch: those of the limited kinds in one
// transaction, then the plain kinds with what is left of the Limit (limited
// kinds first: their limits bound how much of the Limit they take, so they
// cannot starve the others). A fetch with no limits is the one plain
// statement it always was.
func (e *executor) fetchRows(ctx context.Context, p *twicestore.JobFetchParams) (jobs []*twicetype.JobRow, throttled bool, retryAt time.Time, err error) {
	limited, plain := p.LimitedKinds()
	if len(limited) > 0 {
		if jobs, throttled, retryAt, err = e.fetchLimited(ctx, p, limited); err != nil {
			return nil, false, time.Time{}, err
		}
	}
	if left := p.Limit - len(jobs); left > 0 && len(plain) > 0 {
		err := e.write(ctx, func() error {
			more, err := queryJobs(ctx, e.db, fetchSQL,
				micros(p.LeaseUntil), p.Node, p.Queue, micros(p.Now), jsonArg(plain), left)
			jobs = append(jobs, more...)
			return err
		})
		if err != nil {
			return nil, false, time.Time{}, err
		}
	}
	return jobs, throttled, retryAt, nil
}

func (e *executor) fetchLimited(ctx context.Context, p *twicestore.JobFetchParams, limited []string) (jobs []*twicetype.JobRow, throttled bool, retryAt time.Time, err error) {
	// One kind with only a global limit needs one statement, atomic on its
	// own under SQLite's single writer, and no transaction around it: the
	// throttle check after it is a hint, which may read a later state.
	run := e.inTx
	l0 := p.Limits[limited[0]]
	globalOnly := len(limited) == 1 && l0 == (twicestore.KindLimit{Global: l0.Global})
	if globalOnly {
		run = e.direct
	}
	err = run(ctx, func(q dbtx) error {
		// The windows are judged when the fetch holds the write lock, not
		// when it was asked for: a fetch that waited behind other writers
		// would judge them at a stale Now and lease less than the rate
		// allows (0.7 of it in BenchmarkLimits before). A Now given ahead
		// of the clock (tests) stands.
		now := p.Now
		if t := time.Now(); now.Before(t) {
			now = t
		}
		lims := make([][]any, len(limited))
		var prune, rates [][]any
		for i, k := range limited {
			l := p.Limits[k]
			lims[i] = []any{k, l.Global, l.PerKey, l.Rate.Limit, micros(now.Add(-l.Rate.Period)),
				l.KeyRate.Limit, micros(now.Add(-l.KeyRate.Period)), l.KeyOrderSkipsRetries}
			if longest := max(l.Rate.Period, l.KeyRate.Period); longest > 0 {
				prune = append(prune, []any{k, micros(now.Add(-longest - driverkit.RateStartsKept))})
			}
			if l.Rate.Limit > 0 {
				rates = append(rates, []any{k, l.Rate.Period.Microseconds(), micros(now.Add(-l.Rate.Period))})
			}
		}
		query, args := fetchLimitedSQL, []any{p.Queue, micros(now), p.Limit, micros(p.LeaseUntil), p.Node, jsonArg(lims)}
		room := 1
		if globalOnly {
			query, args = fetchGlobalSQL, []any{p.Queue, micros(now), p.Limit, micros(p.LeaseUntil), p.Node, limited[0], l0.Global}
		} else if err := q.QueryRowContext(ctx, limitCapsSQL, args...).Scan(&room); err != nil {
			return fmt.Errorf("read the room the limits leave: %w", err)
		}
		var starts [][2]string
		if room > 0 {
			rows, err := q.QueryContext(ctx, query, args...)
			if err != nil {
				return err
			}
			for row, err := range dbrows.Iter(rows) {
				if err != nil {
					return err
				}
				var key string
				j, err := scanJob(keyScanner{row, &key})
				if err != nil {
					return err
				}
				jobs = append(jobs, j)
				l := p.Limits[j.Kind]
				if l.Rate.Limit > 0 {
					starts = append(starts, [2]string{j.Kind, ""})
				}
				if l.KeyRate.Limit > 0 && key != "" {
					starts = append(starts, [2]string{j.Kind, key})
				}
			}
		}
		if len(starts) > 0 {
			if _, err := q.ExecContext(ctx, rateStartSQL, jsonArg(starts), micros(now)); err != nil {
				return fmt.Errorf("record rate-limited starts: %w", err)
			}
		}
		if len(prune) > 0 && driverkit.PruneRateStarts() {
			if _, err := q.ExecContext(ctx, ratePruneSQL, jsonArg(prune)); err != nil {
				return fmt.Errorf("prune rate windows: %w", err)
			}
		}
		if len(jobs) < p.Limit {
			if err := q.QueryRowContext(ctx, dueLeftSQL, p.Queue, jsonArg(limited), micros(now)).Scan(&throttled); err != nil {
				return err
			}
		}
		if throttled && len(rates) > 0 {
			var at sql.NullInt64
			if err := q.QueryRowContext(ctx, retryAtSQL, jsonArg(rates)).Scan(&at); err != nil {
				return err
			}
			retryAt = driverkit.FromNullMicros(at)
		}
		return nil
	})
	return jobs, throttled, retryAt, err
}

// limitUsageSQL reports one limited kind's usage. The third column counts
// the due jobs the fetch's key rules would let start (ignoring the kind's
// cap, which driverkit.Throttled applies): the rest are throttled.
const limitUsageSQL = `SELECT
	(SELECT count(*) FROM twice_jobs WHERE state = 'running' AND kind = ?1),
	(SELECT count(*) FROM twice_jobs WHERE state = 'available' AND kind = ?1 AND run_at <= ?2),
	(SELECT count(*) FROM twice_jobs AS j
		WHERE j.state = 'available' AND j.kind = ?1 AND j.run_at <= ?2
			AND (?3 = 0 OR j.concurrency_key = '' OR (SELECT count(*) FROM twice_jobs AS e
				WHERE e.kind = j.kind AND e.concurrency_key = j.concurrency_key
					AND e.concurrency_key <> '' AND e.state IN ('available', 'running')
					AND (e.state = 'running' OR e.id < j.id
						AND NOT (?7 AND e.epoch > 0 AND e.run_at > ?2))) < ?3)
			AND (?4 = 0 OR j.concurrency_key = '' OR (SELECT count(*) FROM twice_rate_starts AS s
				WHERE s.kind = j.kind AND s.key = j.concurrency_key AND s.at > ?5) < ?4)),
	(SELECT count(DISTINCT concurrency_key) FROM twice_jobs
		WHERE kind = ?1 AND concurrency_key <> '' AND state IN ('available', 'running')),
	(SELECT count(DISTINCT concurrency_key) FROM twice_jobs
		WHERE kind = ?1 AND concurrency_key <> '' AND state = 'running'),
	(SELECT count(*) FROM twice_rate_starts WHERE kind = ?1 AND key = '' AND at > ?6)`

// LimitList reports the usage of each limited kind, one statement per
// kind (an operator's query: a handful of kinds).
func (e *executor) LimitList(ctx context.Context, p *twicestore.LimitListParams) (*twicestore.LimitListResult, error) {
	now := p.Now
	if now.IsZero() {
		now = time.Now()
	}
	kinds := make([]string, 0, len(p.Limits))
	for k := range p.Limits {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	res := &twicestore.LimitListResult{}
	for _, kind := range kinds {
		l := p.Limits[kind]
		u := twicestore.LimitUsage{Kind: kind, Limit: l}
		var eligible int
		err := e.db.QueryRowContext(ctx, limitUsageSQL, kind, micros(now), l.PerKey, l.KeyRate.Limit,
			micros(now.Add(-l.KeyRate.Period)), micros(now.Add(-l.Rate.Period)), l.KeyOrderSkipsRetries).
			Scan(&u.Running, &u.Due, &eligible, &u.Keys, &u.BusyKeys, &u.RateUsed)
		if err != nil {
			return nil, fmt.Errorf("limit usage of kind %q: %w", kind, err)
		}
		driverkit.SettleUsage(&u, eligible)
		res.Kinds = append(res.Kinds, u)
	}
	return res, nil
}
