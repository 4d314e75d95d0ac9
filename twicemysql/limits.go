package twicemysql

// Flow control: the fetch of limited kinds, and the usage report.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// lockLimitsSQL takes the lock row of each limited kind (creating it the
// first time), kinds in sorted order so two fetches never wait on each
// other in a cycle. A duplicate key in INSERT ... ON DUPLICATE KEY UPDATE
// locks the existing row exclusively, so this one statement both creates
// and locks; the locks are held until the fetch's transaction ends. Each
// statement after it reads a fresh snapshot (READ COMMITTED), and a
// transaction's commit is visible before its locks are released, so a
// fetch counts the running jobs and the rate starts that the previous
// holder committed.
const lockLimitsSQL = "INSERT INTO twice_limit_locks (kind) VALUES %s ON DUPLICATE KEY UPDATE kind = VALUES(kind)"

// pausedSQL reads the database's clock (or the fetch's Now when ahead of
// it: tests) and tells whether the queue is paused then (with no until,
// or one still ahead).
const pausedSQL = `SELECT c.at, EXISTS (SELECT 1 FROM twice_queue_pauses WHERE queue = ? AND (until IS NULL OR until > c.at))
FROM (SELECT GREATEST(COALESCE(CAST(? AS DATETIME(6)), UTC_TIMESTAMP(6)), UTC_TIMESTAMP(6)) AS at) AS c`

// kindRoom is what the fetch knows of one limited kind while it leases.
type kindRoom struct {
	limit        twicestore.KindLimit
	cap          int       // what the kind may still start in this fetch
	keyRateSince time.Time // the start of the per-key rate window
}

// fetchLimited leases jobs of the limited kinds in one transaction, under
// the kinds' lock rows (lockLimitsSQL):
//
//   - the room of each kind is read: the global limit minus its running
//     jobs, the rate limit minus the starts in its window, and the
//     fetch's Limit, whichever is least;
//   - the candidates are read in fetch order, keeping the jobs whose kind
//     has room, whose key has fewer than PerKey jobs running or enqueued
//     before them and unfinished (both the per-key limit and its enqueue
//     order; with KeyOrderSkipsRetries an earlier job that ran before and
//     is not due, a retry, does not count), and whose key has rate left,
//     so a throttled key at the head of the queue never fills the Limit;
//   - the candidates are locked, SKIP LOCKED (a job a cancel or a plain
//     fetch holds is passed over), trimmed to each kind's room and each
//     key's rate left, leased, and their starts recorded in the rate
//     windows.
//
// The candidate read does not lock: MySQL and MariaDB differ on whether a
// locking read locks the rows its subqueries read, and with SKIP LOCKED a
// counted row skipped would be a row not counted.
//
// Afterwards, when it leased less than its Limit, it tells whether the
// limits held due jobs back (Throttled) and when the kind-wide rate
// windows next free a start (RetryAt).
func (e *executor) fetchLimited(ctx context.Context, p *twicestore.JobFetchParams, limited []string) (jobs []*twicetype.JobRow, throttled bool, retryAt time.Time, err error) {
	err = e.inTxUnsettled(ctx, func(q dbtx) error {
		jobs, throttled, retryAt = nil, false, time.Time{}
		list, args := in(limited)
		if _, err := q.ExecContext(ctx, fmt.Sprintf(lockLimitsSQL, strings.TrimSuffix(strings.Repeat("(?), ", len(limited)), ", ")), args...); err != nil {
			return fmt.Errorf("lock the limited kinds: %w", err)
		}
		// The windows are judged once the fetch holds the kinds' locks, not
		// when it was asked for: a fetch that waited behind others would
		// judge them at a stale Now and lease less than the rate allows.
		// They are judged on the database's clock, the one every fetch of
		// every node shares: by their own clocks, two nodes whose clocks
		// differ would each see a window the other's starts are not in.
		var (
			now    time.Time
			paused bool
		)
		if err := q.QueryRowContext(ctx, pausedSQL, p.Queue, nullTime(p.Now)).Scan(&now, &paused); err != nil {
			return fmt.Errorf("read the clock and the queue's pause: %w", err)
		}
		now = now.UTC()
		if paused {
			return nil
		}
		rooms, err := limitRooms(ctx, q, p, limited, now)
		if err != nil {
			return err
		}
		var keys map[int64]string
		jobs, keys, err = leaseLimited(ctx, q, p, rooms, now)
		if err != nil {
			return err
		}
		// The starts are stamped with the clock read once the jobs are
		// leased, not with now: a start's stamp is then at or after the
		// moment its job turned running, and the next fetch, which waits
		// for a stamp to leave its window, cannot turn jobs running within
		// a window of the database's clock that holds this fetch's. No
		// start of these kinds is stamped between now and then (this
		// fetch holds their locks), so the windows counted at now are the
		// ones that count.
		startedAt := now
		if len(jobs) > 0 {
			if err := q.QueryRowContext(ctx, `SELECT GREATEST(COALESCE(CAST(? AS DATETIME(6)), UTC_TIMESTAMP(6)), UTC_TIMESTAMP(6))`,
				nullTime(p.Now)).Scan(&startedAt); err != nil {
				return fmt.Errorf("read the clock: %w", err)
			}
		}
		if err := recordStarts(ctx, q, p, jobs, keys, startedAt.UTC()); err != nil {
			return err
		}
		if len(jobs) < p.Limit {
			if err := q.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM twice_jobs
				WHERE state = 'available' AND queue = ? AND kind IN `+list+` AND run_at <= ?)`,
				append(append([]any{p.Queue}, args...), dbTime(now))...).Scan(&throttled); err != nil {
				return fmt.Errorf("read the jobs held back: %w", err)
			}
		}
		if throttled {
			if retryAt, err = nextRateStart(ctx, q, p, limited, now); err != nil {
				return err
			}
		}
		return nil
	})
	return jobs, throttled, retryAt, err
}

// limitRooms reads what each limited kind may still start.
func limitRooms(ctx context.Context, q dbtx, p *twicestore.JobFetchParams, limited []string, now time.Time) (map[string]*kindRoom, error) {
	rooms := make(map[string]*kindRoom, len(limited))
	var globals, rated []string
	for _, k := range limited {
		l := p.Limits[k]
		rooms[k] = &kindRoom{limit: l, cap: p.Limit, keyRateSince: now.Add(-l.KeyRate.Period)}
		if l.Global > 0 {
			globals = append(globals, k)
		}
		if l.Rate.Limit > 0 {
			rated = append(rated, k)
		}
	}
	if len(globals) > 0 {
		list, args := in(globals)
		rows, err := q.QueryContext(ctx, `SELECT kind, COUNT(*) FROM twice_jobs
			WHERE state = 'running' AND kind IN `+list+` GROUP BY kind`, args...)
		if err != nil {
			return nil, fmt.Errorf("count running jobs: %w", err)
		}
		running, err := dbrows.Pairs[string, int](rows)
		if err != nil {
			return nil, fmt.Errorf("count running jobs: %w", err)
		}
		for _, k := range globals {
			r := rooms[k]
			r.cap = min(r.cap, r.limit.Global-running[k])
		}
	}
	if len(rated) > 0 {
		conds := make([]string, len(rated))
		var args []any
		for i, k := range rated {
			conds[i] = "(kind = ? AND at > ?)"
			args = append(args, k, dbTime(now.Add(-p.Limits[k].Rate.Period)))
		}
		rows, err := q.QueryContext(ctx, "SELECT kind, COUNT(*) FROM twice_rate_starts WHERE `key` = '' AND ("+
			strings.Join(conds, " OR ")+") GROUP BY kind", args...)
		if err != nil {
			return nil, fmt.Errorf("count rate-limited starts: %w", err)
		}
		used, err := dbrows.Pairs[string, int](rows)
		if err != nil {
			return nil, fmt.Errorf("count rate-limited starts: %w", err)
		}
		for _, k := range rated {
			r := rooms[k]
			r.cap = min(r.cap, r.limit.Rate.Limit-used[k])
		}
	}
	return rooms, nil
}

// candidate is a due job of a limited kind the fetch may lease.
type candidate struct {
	id        int64
	kind, key string
}

// leaseLimited reads the candidates of the kinds with room, locks them,
// trims them to the rooms and leases them. It returns the jobs leased and
// the concurrency key of each candidate, by id.
func leaseLimited(ctx context.Context, q dbtx, p *twicestore.JobFetchParams, rooms map[string]*kindRoom, now time.Time) ([]*twicetype.JobRow, map[int64]string, error) {
	var (
		blocks []string
		args   = []any{p.Queue, dbTime(now)}
	)
	for _, k := range slices.Sorted(maps.Keys(rooms)) {
		r := rooms[k]
		if r.cap <= 0 {
			continue
		}
		block := "(j.kind = ?"
		args = append(args, k)
		if r.limit.PerKey > 0 {
			retry := ""
			if r.limit.KeyOrderSkipsRetries {
				retry = " AND NOT (e.epoch > 0 AND e.run_at > ?)"
				args = append(args, dbTime(now))
			}
			block += ` AND (j.concurrency_key = '' OR (SELECT COUNT(*) FROM twice_jobs AS e
				WHERE e.kind = j.kind AND e.concurrency_key = j.concurrency_key AND e.state IN ('available', 'running')
					AND (e.state = 'running' OR e.id < j.id` + retry + `)) < ?)`
			args = append(args, r.limit.PerKey)
		}
		if r.limit.KeyRate.Limit > 0 {
			block += " AND (j.concurrency_key = '' OR (SELECT COUNT(*) FROM twice_rate_starts AS s" +
				" WHERE s.kind = j.kind AND s.`key` = j.concurrency_key AND s.at > ?) < ?)"
			args = append(args, dbTime(r.keyRateSince), r.limit.KeyRate.Limit)
		}
		blocks = append(blocks, block+")")
	}
	if len(blocks) == 0 {
		return nil, nil, nil
	}
	rows, err := q.QueryContext(ctx, `SELECT j.id, j.kind, j.concurrency_key FROM twice_jobs AS j FORCE INDEX (twice_jobs_fetch)
		WHERE j.state = 'available' AND j.queue = ? AND j.run_at <= ? AND (`+strings.Join(blocks, " OR ")+`)
		ORDER BY j.priority, j.run_at, j.id
		LIMIT ?`, append(args, p.Limit)...)
	if err != nil {
		return nil, nil, fmt.Errorf("read candidates: %w", err)
	}
	cands, err := dbrows.Collect(rows, func(r dbrows.Scanner) (c candidate, err error) {
		err = r.Scan(&c.id, &c.kind, &c.key)
		return c, err
	})
	if err != nil || len(cands) == 0 {
		return nil, nil, err
	}
	keyLeft, err := keyRatesLeft(ctx, q, rooms, cands)
	if err != nil {
		return nil, nil, err
	}
	ids := make([]int64, len(cands))
	keys := make(map[int64]string, len(cands))
	for i, c := range cands {
		ids[i] = c.id
		keys[c.id] = c.key
	}
	list, idArgs := in(ids)
	rows, err = q.QueryContext(ctx, `SELECT id FROM twice_jobs WHERE id IN `+list+` AND state = 'available'
		ORDER BY id FOR UPDATE SKIP LOCKED`, idArgs...)
	if err != nil {
		return nil, nil, fmt.Errorf("lock candidates: %w", err)
	}
	lockedIDs, err := dbrows.Collect(rows, dbrows.One[int64])
	if err != nil {
		return nil, nil, fmt.Errorf("lock candidates: %w", err)
	}
	locked := make(map[int64]bool, len(lockedIDs))
	for _, id := range lockedIDs {
		locked[id] = true
	}
	var (
		picked  []int64
		perKind = map[string]int{}
		perKey  = map[candidate]int{}
	)
	for _, c := range cands {
		if !locked[c.id] || perKind[c.kind] >= rooms[c.kind].cap {
			continue
		}
		ref := candidate{kind: c.kind, key: c.key}
		if left, ok := keyLeft[ref]; ok && perKey[ref] >= left {
			continue
		}
		perKind[c.kind]++
		perKey[ref]++
		picked = append(picked, c.id)
	}
	jobs, err := leaseIDs(ctx, q, p, dbTime(now), picked)
	return jobs, keys, err
}

// keyRatesLeft returns, for each kind and key of the candidates under a
// per-key rate limit, the starts its window has left.
func keyRatesLeft(ctx context.Context, q dbtx, rooms map[string]*kindRoom, cands []candidate) (map[candidate]int, error) {
	left := map[candidate]int{}
	var (
		conds []string
		args  []any
	)
	for _, c := range cands {
		r := rooms[c.kind]
		ref := candidate{kind: c.kind, key: c.key}
		if r.limit.KeyRate.Limit == 0 || c.key == "" {
			continue
		}
		if _, ok := left[ref]; ok {
			continue
		}
		left[ref] = r.limit.KeyRate.Limit
		conds = append(conds, "(kind = ? AND `key` = ? AND at > ?)")
		args = append(args, c.kind, c.key, dbTime(r.keyRateSince))
	}
	if len(conds) == 0 {
		return left, nil
	}
	rows, err := q.QueryContext(ctx, "SELECT kind, `key`, COUNT(*) FROM twice_rate_starts WHERE "+
		strings.Join(conds, " OR ")+" GROUP BY kind, `key`", args...)
	if err != nil {
		return nil, fmt.Errorf("count per-key starts: %w", err)
	}
	err = dbrows.Each(rows, func(r dbrows.Scanner) error {
		var (
			ref candidate
			n   int
		)
		if err := r.Scan(&ref.kind, &ref.key, &n); err != nil {
			return err
		}
		left[ref] -= n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count per-key starts: %w", err)
	}
	return left, nil
}

// recordStarts records the starts of the leased jobs (whose concurrency
// keys are keys, by id) in their kinds' rate windows (kind-wide under the
// key ”), stamped now, and now and then prunes the starts no window can
// see any more.
func recordStarts(ctx context.Context, q dbtx, p *twicestore.JobFetchParams, jobs []*twicetype.JobRow, keys map[int64]string, now time.Time) error {
	var (
		values []string
		args   []any
	)
	for _, j := range jobs {
		l := p.Limits[j.Kind]
		if l.Rate.Limit > 0 {
			values, args = append(values, "(?, '', ?)"), append(args, j.Kind, dbTime(now))
		}
		if key := keys[j.ID]; l.KeyRate.Limit > 0 && key != "" {
			values, args = append(values, "(?, ?, ?)"), append(args, j.Kind, key, dbTime(now))
		}
	}
	if len(values) > 0 {
		if _, err := q.ExecContext(ctx, "INSERT INTO twice_rate_starts (kind, `key`, at) VALUES "+
			strings.Join(values, ", "), args...); err != nil {
			return fmt.Errorf("record rate-limited starts: %w", err)
		}
	}
	var (
		conds     []string
		pruneArgs []any
	)
	for k, l := range p.Limits {
		if longest := max(l.Rate.Period, l.KeyRate.Period); longest > 0 && slices.Contains(p.Kinds, k) {
			conds = append(conds, "(kind = ? AND at <= ?)")
			pruneArgs = append(pruneArgs, k, dbTime(now.Add(-longest-driverkit.RateStartsKept)))
		}
	}
	if len(conds) > 0 && driverkit.PruneRateStarts() {
		if _, err := q.ExecContext(ctx, "DELETE FROM twice_rate_starts WHERE "+strings.Join(conds, " OR "), pruneArgs...); err != nil {
			return fmt.Errorf("prune rate windows: %w", err)
		}
	}
	return nil
}

// nextRateStart finds when the kind-wide rate windows of the limited kinds
// next free a start: the oldest start in each window plus its period. Zero
// when no window holds one.
func nextRateStart(ctx context.Context, q dbtx, p *twicestore.JobFetchParams, limited []string, now time.Time) (time.Time, error) {
	var (
		conds []string
		args  []any
	)
	for _, k := range limited {
		if l := p.Limits[k]; l.Rate.Limit > 0 {
			conds = append(conds, "(kind = ? AND at > ?)")
			args = append(args, k, dbTime(now.Add(-l.Rate.Period)))
		}
	}
	if len(conds) == 0 {
		return time.Time{}, nil
	}
	rows, err := q.QueryContext(ctx, "SELECT kind, MIN(at) FROM twice_rate_starts WHERE `key` = '' AND ("+
		strings.Join(conds, " OR ")+") GROUP BY kind", args...)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the rate windows: %w", err)
	}
	var next time.Time
	err = dbrows.Each(rows, func(r dbrows.Scanner) error {
		var (
			kind   string
			oldest time.Time
		)
		if err := r.Scan(&kind, &oldest); err != nil {
			return err
		}
		at := oldest.UTC().Add(p.Limits[kind].Rate.Period)
		if next.IsZero() || at.Before(next) {
			next = at
		}
		return nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("read the rate windows: %w", err)
	}
	return next, nil
}

// limitUsageSQL reports one limited kind's usage. The third column counts
// the due jobs the fetch's key rules would let start (ignoring the kind's
// cap, which driverkit.Throttled applies): the rest are throttled.
// Parameters: 1 kind, 2 now, 3 per-key limit, 4 per-key rate limit, 5 its
// window's start, 6 the kind-wide rate window's start, 7 whether the key
// order skips retries.
var limitUsageSQL, limitUsageOrder = numbered(`SELECT
	(SELECT COUNT(*) FROM twice_jobs WHERE state = 'running' AND kind = ?1),
	(SELECT COUNT(*) FROM twice_jobs WHERE state = 'available' AND kind = ?1 AND run_at <= ?2),
	(SELECT COUNT(*) FROM twice_jobs AS j
		WHERE j.state = 'available' AND j.kind = ?1 AND j.run_at <= ?2
			AND (?3 = 0 OR j.concurrency_key = '' OR (SELECT COUNT(*) FROM twice_jobs AS e
				WHERE e.kind = j.kind AND e.concurrency_key = j.concurrency_key
					AND e.concurrency_key <> '' AND e.state IN ('available', 'running')
					AND (e.state = 'running' OR e.id < j.id
						AND NOT (?7 AND e.epoch > 0 AND e.run_at > ?2))) < ?3)
			AND (?4 = 0 OR j.concurrency_key = '' OR (SELECT COUNT(*) FROM twice_rate_starts AS s
				WHERE s.kind = j.kind AND s.` + "`key`" + ` = j.concurrency_key AND s.at > ?5) < ?4)),
	(SELECT COUNT(DISTINCT concurrency_key) FROM twice_jobs
		WHERE kind = ?1 AND concurrency_key <> '' AND state IN ('available', 'running')),
	(SELECT COUNT(DISTINCT concurrency_key) FROM twice_jobs
		WHERE kind = ?1 AND concurrency_key <> '' AND state = 'running'),
	(SELECT COUNT(*) FROM twice_rate_starts WHERE kind = ?1 AND ` + "`key`" + ` = '' AND at > ?6)`)

// LimitList reports the usage of each limited kind, one statement per
// kind (an operator's query: a handful of kinds).
func (e *executor) LimitList(ctx context.Context, p *twicestore.LimitListParams) (*twicestore.LimitListResult, error) {
	now := nowOr(p.Now)
	res := &twicestore.LimitListResult{}
	for _, kind := range slices.Sorted(maps.Keys(p.Limits)) {
		l := p.Limits[kind]
		u := twicestore.LimitUsage{Kind: kind, Limit: l}
		var eligible int
		params := []any{kind, dbTime(now), l.PerKey, l.KeyRate.Limit, dbTime(now.Add(-l.KeyRate.Period)),
			dbTime(now.Add(-l.Rate.Period)), l.KeyOrderSkipsRetries}
		args := make([]any, len(limitUsageOrder))
		for i, n := range limitUsageOrder {
			args[i] = params[n]
		}
		err := e.db.QueryRowContext(ctx, limitUsageSQL, args...).
			Scan(&u.Running, &u.Due, &eligible, &u.Keys, &u.BusyKeys, &u.RateUsed)
		if err != nil {
			return nil, fmt.Errorf("limit usage of kind %q: %w", kind, err)
		}
		driverkit.SettleUsage(&u, eligible)
		res.Kinds = append(res.Kinds, u)
	}
	return res, nil
}
