package twicepg

// The life of a job: insert, fetch under a lease, extend the lease, finish,
// and rescue when the lease expired.

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// jobCols renders the job columns of the table or CTE named alias. The error
// history and the metadata are read as JSON text, which pgx and database/sql both scan into a
// string.
func jobCols(alias string) string {
	cols := make([]string, len(driverkit.JobColumnNames))
	for i, c := range driverkit.JobColumnNames {
		cols[i] = alias + "." + c
		if c == "errors" || c == "metadata" {
			cols[i] += "::text AS " + c
		}
	}
	return strings.Join(cols, ", ")
}

// jobColumns are the columns of twice_jobs AS j.
var jobColumns = jobCols("j")

// scanJob scans one row of jobColumns, after the extra destinations a query
// puts before them.
func scanJob(r row, extra ...any) (*twicetype.JobRow, error) {
	return driverkit.ScanJob(driverkit.NativeTimes, r, extra...)
}

// jobScanner scans rows of jobColumns, after the extra destinations a query
// puts before them, into one set of destinations: a query that scans many
// rows builds the destinations, which escape to the heap, once rather than
// once a row as scanJob does (24 allocations and 1,187 B a row against 13
// and 580, BenchmarkScanJobs). Every row gets a JobRow of its own, and its
// slices and strings are the driver's fresh copies (the destinations are
// zeroed before each row), so rows never share memory.
type jobScanner struct {
	j                      twicetype.JobRow
	state, errs, meta      string
	leaseUntil, finishedAt sql.NullTime
	cancelAt               sql.NullTime
	cancelBy, cancelReason string
	dest                   []any
}

func newJobScanner(extra ...any) *jobScanner {
	s := &jobScanner{}
	j := &s.j
	s.dest = append(extra, &j.ID, &j.Kind, &j.Queue, &j.Priority, &j.Args, &j.MessageID, &j.Key, &j.CorrelationID,
		&j.UniqueKey, &s.state, &j.Attempt, &j.MaxAttempts, &j.Epoch, &j.RunAt, &s.leaseUntil, &j.AttemptedBy,
		&s.errs, &j.Note, &j.CreatedAt, &s.finishedAt, &s.meta, &s.cancelAt, &s.cancelBy, &s.cancelReason, &j.Snoozes, &j.Trace,
		&j.WaitName, &j.SignalSeq)
	return s
}

// scan scans r and returns the job, a row of its own.
func (s *jobScanner) scan(r row) (*twicetype.JobRow, error) {
	s.j = twicetype.JobRow{}
	if err := r.Scan(s.dest...); err != nil {
		return nil, err
	}
	j := new(twicetype.JobRow)
	*j = s.j
	if s.cancelAt.Valid {
		j.Cancel = &twicetype.CancelRequest{At: driverkit.FromNullTime(s.cancelAt), By: s.cancelBy, Reason: s.cancelReason}
	}
	j.State = twicetype.JobState(s.state)
	j.RunAt = j.RunAt.UTC()
	j.CreatedAt = j.CreatedAt.UTC()
	j.LeaseUntil = driverkit.FromNullTime(s.leaseUntil)
	j.FinishedAt = driverkit.FromNullTime(s.finishedAt)
	if err := driverkit.DecodeJobJSON(j, s.errs, s.meta); err != nil {
		return nil, err
	}
	return j, nil
}

// queryJobs runs a query returning jobColumns and scans every row.
func queryJobs(ctx context.Context, q querier, query string, args ...any) ([]*twicetype.JobRow, error) {
	rs, err := q.query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	var jobs []*twicetype.JobRow
	scanner := newJobScanner()
	for row, err := range dbrows.Iter(rs) {
		if err != nil {
			return nil, err
		}
		j, err := scanner.scan(row)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// insertSQL inserts a batch in one statement, from one array per column, and
// returns a row per inserted job with its input's position (ord), plus the
// stored holders of the unique keys the inputs repeat.
//
//   - input draws the ids first (nextval, in input order), so each inserted
//     row is matched to its input by id, whatever order RETURNING uses.
//   - inserted skips an input whose kind and unique key a job holds (one in
//     a state among its own unique_states, migration 014): a stored one, or
//     an earlier input of the batch. The claim trigger of migration 022
//     skips it, as ON CONFLICT DO NOTHING did on the unique index that held
//     keys before, and waits for a claim another transaction is writing.
//     Rows go in by kind and unique key, then input order: the first of a
//     batch's repeats is the one inserted, and two batches racing over the
//     same keys (schedulers on several nodes enqueuing the same ticks) wait
//     for each other's keys in the same order, so they cannot deadlock.
//   - the second SELECT sees the table as it was when the statement began,
//     so it finds the stored holders and not the rows inserted here (those
//     are resolved in Go).
//   - notified sends one pg_notify per queue given; joining it to input makes
//     it run. Notifications are sent when the transaction commits.
var insertSQL = `WITH notified AS (
	SELECT count(pg_notify($1, q)) AS n FROM unnest($2::text[]) AS q
),
input AS MATERIALIZED (
	SELECT nextval('twice_jobs_id_seq') AS id, t.*
	FROM unnest($3::text[], $4::text[], $5::integer[], $6::bytea[], $7::text[], $8::text[], $9::text[],
		$10::text[], $11::integer[], $12::timestamptz[], $13::timestamptz[], $14::text[], $15::text[],
		$16::bigint[], $17::bigint[], $18::integer[])
		WITH ORDINALITY AS t(kind, queue, priority, args, message_id, idempotency_key, correlation_id,
			unique_key, max_attempts, run_at, created_at, metadata, concurrency_key, parent_id, batch_id,
			unique_states, ord)
	CROSS JOIN notified
),
inserted AS (
	INSERT INTO twice_jobs AS j (id, kind, queue, priority, args, message_id, idempotency_key,
		correlation_id, unique_key, max_attempts, run_at, created_at, metadata, concurrency_key, parent_id, batch_id,
		unique_states)
	SELECT id, kind, queue, priority, args, message_id, idempotency_key,
		correlation_id, unique_key, max_attempts, run_at, created_at, metadata::jsonb, concurrency_key,
		nullif(parent_id, 0), nullif(batch_id, 0), unique_states
	FROM input ORDER BY kind, unique_key, ord
	ON CONFLICT DO NOTHING
	RETURNING ` + jobColumns + `
)
SELECT input.ord, false, ` + jobCols("inserted") + `
FROM inserted JOIN input ON input.id = inserted.id
UNION ALL
SELECT 0, true, ` + jobColumns + `
FROM twice_jobs AS j
WHERE ` + driverkit.UniqueHeldSQL("j") + `
	AND (j.kind, j.unique_key) IN (SELECT kind, unique_key FROM input WHERE unique_key <> '')`

// insertOneSQL inserts one job without a unique key: insertSQL's work
// without the arrays, the position bookkeeping and the unique-key branch,
// which a single job with no key to hold needs none of. Enqueuing one job
// at a time is the common case (a request enqueues its job), and it took
// insertSQL about 0.6 ms of the server's time where this takes a fraction.
// It notifies $2 on channel $1 in the statement, as insertSQL does.
var insertOneSQL = `WITH notified AS (
	SELECT count(pg_notify($1, q)) AS n FROM unnest($2::text[]) AS q
)
INSERT INTO twice_jobs AS j (kind, queue, priority, args, message_id, idempotency_key, correlation_id,
	max_attempts, run_at, created_at, metadata, concurrency_key, parent_id, batch_id, unique_states)
SELECT $3::text, $4::text, $5::integer, $6::bytea, $7::text, $8::text, $9::text,
	$10::integer, $11::timestamptz, $12::timestamptz, $13::jsonb, $14::text,
	nullif($15::bigint, 0), nullif($16::bigint, 0), $17::integer
FROM notified
RETURNING ` + jobColumns

// insertOneOff, set by benchmarks only, sends single jobs through
// insertSQL too, as before insertOneSQL, so the two can be measured side
// by side.
var insertOneOff = false

// metadataJSON encodes job metadata for its column; none is "{}".
func metadataJSON(m map[string]string) string {
	if len(m) == 0 {
		return "{}"
	}
	b, _ := json.Marshal(m) // a map of strings always encodes
	return string(b)
}

// insertTries bounds how often an insert is repeated for inputs a concurrent
// transaction made ambiguous (see JobInsertMany).
const insertTries = 5

type uniqueRef struct{ kind, key string }

// JobInsertMany inserts the jobs with one statement, a single round trip
// however many there are, which is atomic on its own. A job whose unique key
// a job of its kind holds (already stored, or earlier in the same batch) is
// skipped and reported with that job.
//
// One case takes another round trip: another transaction inserted the
// conflicting job and committed while the statement ran, too late for the
// statement to see it. The statement is then repeated for those inputs only,
// and finds it.
//
// A zero CreatedAt is the current time and a zero RunAt is CreatedAt; a nil
// Args is stored as an empty payload. The insert notifies each queue's
// listeners (see the package doc).
func (e *executor) JobInsertMany(ctx context.Context, p *twicestore.JobInsertManyParams) (*twicestore.JobInsertManyResult, error) {
	res := &twicestore.JobInsertManyResult{Jobs: make([]*twicestore.JobInsertResult, len(p.Jobs))}
	pending := make([]int, len(p.Jobs)) // positions of the inputs not resolved yet
	for i := range pending {
		pending[i] = i
	}
	for try := 0; len(pending) > 0; try++ {
		if try == insertTries {
			return nil, fmt.Errorf("insert jobs: %d jobs kept conflicting with unique jobs inserted and finished concurrently", len(pending))
		}
		jobs := make([]*twicestore.JobInsertParams, len(pending))
		for i, pos := range pending {
			jobs[i] = p.Jobs[pos]
		}
		out, err := e.insertBatch(ctx, jobs)
		if err != nil {
			return nil, fmt.Errorf("insert jobs: %w", err)
		}
		var next []int
		for i, r := range out {
			if r == nil {
				next = append(next, pending[i])
				continue
			}
			res.Jobs[pending[i]] = r
		}
		pending = next
	}
	for i, j := range p.Jobs {
		if j.Replace && res.Jobs[i].Duplicate {
			r, err := e.replaceHolder(ctx, j, res.Jobs[i].Job)
			if err != nil {
				return nil, fmt.Errorf("insert jobs: %w", err)
			}
			res.Jobs[i] = r
		}
	}
	return res, nil
}

// replaceTries bounds the rounds of replaceHolder. Each round that does not
// settle means another transaction made progress in between (it leased or
// finished the holder, or inserted a new one), so the loop cannot spin on its
// own; but a worker that leases every new holder at once, beside other
// replacing enqueuers, can outrun a few rounds on a loaded machine
// (TestUniqueReplaceRacesWorker ran out of 5 under -race), hence more than
// insertTries.
const replaceTries = 50

// replaceSQL moves a job's args and run time onto the holder of its key,
// only while the holder waits: the row lock and the state guard make it
// atomic with a fetch that leases the holder at the same moment (one of
// them sees the other's write). A due run time notifies the queue, as an
// insert does.
var replaceSQL = `WITH updated AS (
	UPDATE twice_jobs AS j SET args = $1, run_at = $2
	WHERE id = $3 AND state = 'available'
	RETURNING ` + jobColumns + `
)
SELECT ` + jobCols("updated") + `
FROM updated LEFT JOIN LATERAL (SELECT pg_notify($4, updated.queue) WHERE updated.run_at <= now()) AS n ON true`

// replaceHolder gives holder, which holds j's unique key, j's args and run
// time if it still waits. A holder that is running, or finished in one of
// its unique states, stays as it is and the result is a plain duplicate;
// one that finished in between in another state no longer holds the key,
// so j is inserted after all (and may meet a new holder, tried again up to
// replaceTries times).
func (e *executor) replaceHolder(ctx context.Context, j *twicestore.JobInsertParams, holder *twicetype.JobRow) (*twicestore.JobInsertResult, error) {
	runAt := j.RunAt
	if runAt.IsZero() {
		runAt = time.Now()
	}
	payload := j.Args
	if payload == nil {
		payload = []byte{}
	}
	for try := 0; try < replaceTries; try++ {
		if holder.State != twicetype.JobStateAvailable {
			return &twicestore.JobInsertResult{Job: holder, Duplicate: true}, nil
		}
		e.floors.lowered(holder.Queue, holder.Priority, runAt)
		rows, err := queryJobs(ctx, e.q, replaceSQL, payload, runAt, holder.ID, e.notify.channel)
		if err != nil {
			return nil, fmt.Errorf("replace job %d: %w", holder.ID, err)
		}
		if len(rows) == 1 {
			return &twicestore.JobInsertResult{Job: rows[0], Duplicate: true, Replaced: true}, nil
		}
		// The holder left available: leased or finished holding its key
		// (then it is a duplicate), or finished letting it go (then the
		// key is free). The insert tells which.
		out, err := e.insertBatch(ctx, []*twicestore.JobInsertParams{j})
		if err != nil {
			return nil, err
		}
		if out[0] != nil && !out[0].Duplicate {
			return out[0], nil
		}
		if out[0] != nil {
			holder = out[0].Job
		}
	}
	return nil, fmt.Errorf("job of kind %q: its unique key's holder kept changing while it was replaced", j.Kind)
}

// insertBatch runs insertSQL for jobs and returns a result per job, nil for
// an input that was skipped for a unique key whose holder it cannot see.
func (e *executor) insertBatch(ctx context.Context, jobs []*twicestore.JobInsertParams) ([]*twicestore.JobInsertResult, error) {
	n := len(jobs)
	var (
		kinds, queues, messageIDs, keys, correlationIDs, uniqueKeys = make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		metadata, ckeys         = make([]string, n), make([]string, n)
		parents, batches        = make([]int64, n), make([]int64, n)
		priorities, maxAttempts = make([]int32, n), make([]int32, n)
		uniqueStates            = make([]int32, n)
		payloads                = make([][]byte, n)
		runAts, createdAts      = make([]time.Time, n), make([]time.Time, n)
	)
	now := time.Now()
	for i, j := range jobs {
		createdAt := j.CreatedAt
		if createdAt.IsZero() {
			createdAt = now
		}
		runAt := j.RunAt
		if runAt.IsZero() {
			runAt = createdAt
		}
		payload := j.Args
		if payload == nil {
			payload = []byte{} // a nil element would be NULL
		}
		kinds[i], queues[i], messageIDs[i], keys[i] = j.Kind, j.Queue, j.MessageID, j.Key
		correlationIDs[i], uniqueKeys[i] = j.CorrelationID, j.UniqueKey
		priorities[i], maxAttempts[i] = int32(j.Priority), int32(j.MaxAttempts)
		payloads[i], runAts[i], createdAts[i] = payload, runAt, createdAt
		e.floors.lowered(j.Queue, j.Priority, runAt)
		metadata[i] = metadataJSON(j.Metadata)
		if len(j.ConcurrencyKey) > twicestore.MaxConcurrencyKeyBytes {
			return nil, fmt.Errorf("job %d of kind %q: %w (%d bytes, at most %d)", i, j.Kind,
				twicestore.ErrConcurrencyKeyTooLong, len(j.ConcurrencyKey), twicestore.MaxConcurrencyKeyBytes)
		}
		ckeys[i] = j.ConcurrencyKey
		parents[i], batches[i] = j.ParentID, j.BatchID
		if err := j.UniqueStates.Validate(); err != nil {
			return nil, fmt.Errorf("job %d of kind %q: %w", i, j.Kind, err)
		}
		uniqueStates[i] = int32(j.UniqueStates.OrDefault())
	}
	out := make([]*twicestore.JobInsertResult, n)
	if n == 0 {
		return out, nil
	}

	notifyNow, committed := e.insertNotify(queues, now)
	if n == 1 && uniqueKeys[0] == "" && !insertOneOff {
		rows, err := queryJobs(ctx, e.q, insertOneSQL, e.notify.channel, notifyNow,
			kinds[0], queues[0], priorities[0], payloads[0], messageIDs[0], keys[0], correlationIDs[0],
			maxAttempts[0], runAts[0], createdAts[0], metadata[0], ckeys[0], parents[0], batches[0], uniqueStates[0])
		if err != nil {
			return nil, err
		}
		if len(rows) != 1 {
			return nil, fmt.Errorf("insert returned %d rows for one job", len(rows))
		}
		committed()
		out[0] = &twicestore.JobInsertResult{Job: rows[0]}
		return out, nil
	}
	rs, err := e.q.query(ctx, insertSQL, e.notify.channel, notifyNow,
		kinds, queues, priorities, payloads, messageIDs, keys, correlationIDs,
		uniqueKeys, maxAttempts, runAts, createdAts, metadata, ckeys, parents, batches, uniqueStates)
	if err != nil {
		return nil, err
	}
	inserted := map[uniqueRef]*twicetype.JobRow{} // the batch's own holders
	stored := map[uniqueRef]*twicetype.JobRow{}   // holders stored before it
	for r, err := range dbrows.Iter(rs) {
		if err != nil {
			return nil, err
		}
		var (
			ord int64
			dup bool
		)
		row, err := scanJob(r, &ord, &dup)
		if err != nil {
			return nil, err
		}
		ref := uniqueRef{row.Kind, row.UniqueKey}
		if dup {
			stored[ref] = row
			continue
		}
		if ord < 1 || ord > int64(n) || out[ord-1] != nil {
			return nil, fmt.Errorf("insert returned position %d for %d jobs", ord, n)
		}
		out[ord-1] = &twicestore.JobInsertResult{Job: row}
		if row.UniqueKey != "" {
			inserted[ref] = row
		}
	}
	committed()
	for i, j := range jobs {
		if out[i] != nil {
			continue
		}
		ref := uniqueRef{j.Kind, j.UniqueKey}
		// An input of this batch holds the key rather than a stored job
		// only when that job finished while the statement ran.
		if row, ok := inserted[ref]; ok {
			out[i] = &twicestore.JobInsertResult{Job: row, Duplicate: true}
		} else if row, ok := stored[ref]; ok {
			out[i] = &twicestore.JobInsertResult{Job: row, Duplicate: true}
		} else if j.UniqueKey == "" {
			return nil, fmt.Errorf("job %d of kind %q has no unique key, yet it was not inserted", i, j.Kind)
		}
	}
	return out, nil
}

// fetchSQL leases the first due jobs in fetch order. FOR UPDATE SKIP LOCKED
// makes concurrent fetchers take disjoint jobs without waiting for each
// other; a row another fetcher leased after this statement's snapshot is
// re-checked when locked, found no longer available and dropped, so a job is
// leased once per epoch. The partial fetch index yields rows already in fetch
// order, so the LIMIT stops the scan early.
//
// A queue paused (with no until, or one still ahead) leases nothing: the
// pause is checked in the same statement (once, as an init plan), so a fetch
// never leases a job of a queue whose pause committed before it began.
//
// fetchPeekSQL also peeks, per leased job, the marker of its key under the
// handler $7/$8 name for its kind; fetchSQL, for a fetch that peeks
// nothing, spares every row that subquery.
//
// The floored variants (fetchFlooredSQL, fetchFlooredPeekSQL) start the
// scan at a floor, ($7, $8, $9) after the peek's arrays when there are
// none, else ($9, $10, $11), and read the jobs of a higher priority than
// the floor's in a second scan: see fetchfloor.go. Each scan locks at
// most $4 rows; the rows of the second that the outer LIMIT leaves out
// are unlocked when the statement ends.
var (
	fetchSQL            = fetchLeaseSQL(fetchPickSQL) + `RETURNING false, ` + jobColumns
	fetchPeekSQL        = fetchLeaseSQL(fetchPickSQL) + fetchPeekReturning
	fetchFlooredSQL     = fetchLeaseSQL(fetchFlooredPickSQL("$7", "$8", "$9")) + `RETURNING false, ` + jobColumns
	fetchFlooredPeekSQL = fetchLeaseSQL(fetchFlooredPickSQL("$9", "$10", "$11")) + fetchPeekReturning
)

// fetchPeekReturning returns, with each leased job, whether the marker
// of its key under the handler $7/$8 name for its kind exists.
var fetchPeekReturning = `RETURNING EXISTS (
	SELECT 1 FROM unnest($7::text[], $8::text[]) AS h(kind, handler)
	JOIN twice_markers AS m ON m.handler = h.handler
	WHERE h.kind = j.kind AND m.key = j.idempotency_key
), ` + jobColumns

// fetchDueSQL is the condition of a job the fetch may lease.
const fetchDueSQL = `state = 'available' AND queue = $1 AND kind = ANY($2::text[]) AND run_at <= $3
		AND NOT EXISTS (SELECT 1 FROM twice_queue_pauses AS qp
			WHERE qp.queue = $1 AND (qp.until IS NULL OR qp.until > $3))`

// fetchPickSQL selects the first $4 due jobs in the fetch order.
const fetchPickSQL = `SELECT id FROM twice_jobs
	WHERE ` + fetchDueSQL + `
	ORDER BY priority, run_at, id
	LIMIT $4
	FOR UPDATE SKIP LOCKED`

// fetchFlooredPickSQL is fetchPickSQL starting at the floor (priority,
// runAt, id), plus the jobs of a higher priority than the floor's.
func fetchFlooredPickSQL(priority, runAt, id string) string {
	return `SELECT id FROM (
		SELECT * FROM (SELECT id, priority, run_at FROM twice_jobs
			WHERE ` + fetchDueSQL + ` AND priority < ` + priority + `::int
			ORDER BY priority, run_at, id LIMIT $4 FOR UPDATE SKIP LOCKED) AS urgent
		UNION ALL
		SELECT * FROM (SELECT id, priority, run_at FROM twice_jobs
			WHERE ` + fetchDueSQL + `
				AND (priority, run_at, id) >= (` + priority + `::int, ` + runAt + `::timestamptz, ` + id + `::bigint)
			ORDER BY priority, run_at, id LIMIT $4 FOR UPDATE SKIP LOCKED) AS floored
	) AS both_scans
	ORDER BY priority, run_at, id
	LIMIT $4`
}

// fetchLeaseSQL leases the jobs that pick selects (their ids, locked).
//
// A leased job enters the generation new jobs enter (migration 024), so
// the rotation never has to move a due job out of a generation it empties:
// such a move would leave a dead entry in the fetch index ahead of where
// every fetch starts reading, until the truncation.
//
// The update finds its jobs by id = ANY(ids), one index probe per id in
// each live generation, whatever the statistics say. A join with picked
// is planned from the statistics: a generation just truncated counts as
// empty, and a plan cached then scans it whole for every statement once it
// fills again.
func fetchLeaseSQL(pick string) string {
	return `UPDATE twice_jobs AS j
SET state = 'running', attempt = j.attempt + 1, epoch = j.epoch + 1, lease_until = $5, attempted_by = $6,
	gen = twice_jobs_gen()
WHERE j.id = ANY(ARRAY(
	` + pick + `
)) AND j.state IN ('available', 'running')
`
}

// JobFetch leases up to Limit due jobs of the queue and kinds in one
// statement, which also peeks the markers p.Peek asks for. A Limit of zero
// or less, or no kinds, fetches nothing.
func (e *executor) JobFetch(ctx context.Context, p *twicestore.JobFetchParams) (*twicestore.JobFetchResult, error) {
	if p.Limit <= 0 || len(p.Kinds) == 0 {
		return &twicestore.JobFetchResult{}, nil
	}
	if limited, plain := p.LimitedKinds(); len(limited) > 0 {
		return e.fetchLimited(ctx, p, limited, plain)
	}
	kinds, start := kindsKey(p.Kinds), time.Now()
	floor, floored := e.floors.floorFor(p.Queue, kinds, start)
	query, args := fetchSQL, []any{p.Queue, p.Kinds, nowOr(p.Now), p.Limit, p.LeaseUntil, p.Node}
	if floored {
		query = fetchFlooredSQL
	}
	if len(p.Peek) > 0 {
		peekKinds, peekHandlers := make([]string, 0, len(p.Peek)), make([]string, 0, len(p.Peek))
		for k, h := range p.Peek {
			peekKinds, peekHandlers = append(peekKinds, k), append(peekHandlers, h)
		}
		query, args = fetchPeekSQL, append(args, peekKinds, peekHandlers)
		if floored {
			query = fetchFlooredPeekSQL
		}
	}
	if floored {
		args = append(args, floor.priority, floor.runAt, floor.id)
	}
	rs, err := e.q.query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("fetch queue %q: %w", p.Queue, err)
	}
	type fetched struct {
		job       *twicetype.JobRow
		processed bool
	}
	var (
		out       []fetched
		processed bool
	)
	scanner := newJobScanner(&processed)
	for row, err := range dbrows.Iter(rs) {
		if err != nil {
			return nil, fmt.Errorf("fetch queue %q: %w", p.Queue, err)
		}
		j, err := scanner.scan(row)
		if err != nil {
			return nil, fmt.Errorf("fetch queue %q: %w", p.Queue, err)
		}
		out = append(out, fetched{job: j, processed: processed})
	}
	// RETURNING follows no order.
	slices.SortFunc(out, func(x, y fetched) int {
		a, b := x.job, y.job
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), a.RunAt.Compare(b.RunAt), cmp.Compare(a.ID, b.ID))
	})
	res := &twicestore.JobFetchResult{Jobs: make([]*twicetype.JobRow, len(out)), Processed: make([]bool, len(out))}
	for i, f := range out {
		res.Jobs[i], res.Processed[i] = f.job, f.processed
	}
	var first *twicetype.JobRow
	if len(out) > 0 {
		first = out[0].job
	}
	e.floors.fetched(p.Queue, kinds, start, time.Since(start), floored, p.Limit, len(out), first)
	return res, nil
}

// extendSQL moves the leases still held under their epochs. Its jobs are
// found by id = ANY, as finishSQL's are, whatever the statistics say.
const extendSQL = `UPDATE twice_jobs AS j SET lease_until = $1
FROM unnest($2::bigint[], $3::bigint[]) AS l(id, epoch)
WHERE j.id = ANY($2) AND l.id = j.id + 0 AND j.epoch = l.epoch AND j.state = 'running'
RETURNING j.id, j.cancel_requested_at IS NOT NULL`

// JobExtendLease moves the lease of every job still running under the
// given epoch, in one statement.
func (e *executor) JobExtendLease(ctx context.Context, p *twicestore.JobExtendLeaseParams) (*twicestore.JobExtendLeaseResult, error) {
	res := &twicestore.JobExtendLeaseResult{}
	if len(p.Leases) == 0 {
		return res, nil
	}
	// In id order: where the plan drives the update from the array (the
	// usual plan once the table is large), overlapping batches then lock
	// their rows in the same order instead of deadlocking.
	leases := slices.SortedFunc(slices.Values(p.Leases), func(a, b twicestore.JobLease) int { return cmp.Compare(a.ID, b.ID) })
	ids, epochs := make([]int64, len(leases)), make([]int64, len(leases))
	for i, l := range leases {
		ids[i], epochs[i] = l.ID, l.Epoch
	}
	rs, err := e.q.query(ctx, extendSQL, p.LeaseUntil, ids, epochs)
	if err != nil {
		return nil, fmt.Errorf("extend leases: %w", err)
	}
	for row, err := range dbrows.Iter(rs) {
		if err != nil {
			return nil, fmt.Errorf("extend leases: %w", err)
		}
		var (
			id        int64
			cancelled bool
		)
		if err := row.Scan(&id, &cancelled); err != nil {
			return nil, fmt.Errorf("extend leases: %w", err)
		}
		res.Extended = append(res.Extended, id)
		if cancelled {
			res.CancelRequested = append(res.CancelRequested, id)
		}
	}
	slices.Sort(res.Extended)
	slices.Sort(res.CancelRequested)
	return res, nil
}

// queryIDs runs a query returning one bigint column and returns its values
// sorted.
func queryIDs(ctx context.Context, q querier, query string, args ...any) ([]int64, error) {
	rs, err := q.query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for row, err := range dbrows.Iter(rs) {
		if err != nil {
			return nil, err
		}
		var id int64
		if err := row.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// finishSQL writes a batch of outcomes, each guarded by state and epoch: a
// worker whose lease was lost (rescued, perhaps fetched again under a newer
// epoch) writes nothing. It returns the positions (ord) of the outcomes it
// applied.
//
// claimed inserts the markers travelling with the outcomes in the same
// statement, so in the same transaction, whatever the guard says: the effect
// they record has happened even when the lease was lost. A data-modifying
// CTE runs whether or not the rest of the statement reads it. Markers go in
// key order, so batches claiming the same keys wait for each other in the
// same order.
//
// The jobs are found by id, one index probe per outcome, whatever the
// planner's statistics say: the guard is a condition of the join (the
// CASE), not j.state = 'running'. From that constant the planner proves the
// predicate of twice_jobs_running_kind, and statistics taken while every
// job waited (none running) made it read that whole index at every batch.
// While a long-running reader holds the xmin horizon back, that index
// keeps an entry for every job that ran since (bench/compare/RESULTS.md,
// "Beside a long-running reader"). j.state IN ('available', 'running')
// proves no index's predicate; it leaves the done partition out of the
// plan (migration 023).
//
// j.id = ANY($1) drives one index scan per live generation. The join
// condition is o.id = j.id + 0: with j.id = o.id the planner put both
// conditions in the index probe of each partition, which read the whole
// array for every outcome, and without the ANY the cached generic plan of
// a generation whose statistics say empty (just truncated, or never
// analysed) is a hash join over a sequential scan of it, dead row versions
// included (bench/compare/RESULTS.md, "Partitioned twice_jobs").
//
// An error is appended to the history, which keeps its first and last
// entries only (see keptErrors). A cancelled outcome without a note of its
// own takes the cancel request's.
//
// A waiting outcome (a park) moves the job to twice_jobs_waiting, on
// wait_name until run_at (its timer), unless parkResolvedSQL says its
// wait is resolved already: then the job is available at once, due at
// o.finished_at (the time of the call; a park sets no finished_at), and
// its handler runs again to read what arrived.
var finishSQL = `WITH claimed AS (
	INSERT INTO twice_markers (handler, key, processed_at, job_id, epoch)
	SELECT * FROM unnest($9::text[], $10::text[], $11::timestamptz[], $12::bigint[], $13::bigint[])
		AS m(handler, key, processed_at, job_id, epoch)
	ORDER BY handler, key
	ON CONFLICT (handler, key) DO NOTHING
)
UPDATE twice_jobs AS j SET
	state = CASE WHEN o.state <> 'waiting' THEN o.state WHEN ` + parkResolvedSQL + ` THEN 'available' ELSE 'waiting' END,
	run_at = CASE WHEN o.state = 'available' THEN o.run_at
		WHEN o.state <> 'waiting' THEN j.run_at
		WHEN ` + parkResolvedSQL + ` THEN o.finished_at ELSE o.run_at END,
	wait_name = CASE WHEN o.state = 'waiting' THEN o.wait_name ELSE j.wait_name END,
	attempt = CASE WHEN o.refund THEN greatest(j.attempt - 1, 0) ELSE j.attempt END,
	snoozes = j.snoozes + CASE WHEN o.snooze THEN 1 ELSE 0 END,
	lease_until = NULL,
	errors = CASE WHEN o.err = '' THEN j.errors ELSE ` + keptErrors("j.errors || jsonb_build_array(o.err::jsonb)") + ` END,
	note = CASE WHEN o.state = 'cancelled' AND o.note = '' AND j.cancel_requested_at IS NOT NULL
		THEN ` + cancelNoteSQL + ` ELSE o.note END,
	finished_at = CASE WHEN o.state IN ('completed', 'dead', 'cancelled') THEN o.finished_at END,
	output = CASE WHEN o.state = 'completed' AND o.output IS NOT NULL THEN o.output ELSE j.output END,
	trace = o.trace
FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::timestamptz[], $5::boolean[], $6::text[],
	$7::text[], $8::timestamptz[], $14::boolean[], $15::text[], $16::text[], $17::text[], $18::bigint[])
	WITH ORDINALITY AS o(id, epoch, state, run_at, refund, err, note, finished_at, snooze, output, trace,
		wait_name, signal_seq, ord)
WHERE j.id = ANY($1) AND o.id = j.id + 0 AND j.state IN ('available', 'running')
	AND CASE WHEN j.state = 'running' THEN j.epoch = o.epoch ELSE false END
RETURNING o.ord`

// parkResolvedSQL is true when the wait a park (o) names is resolved
// already, and the job must not wait: a signal or a timer resolved one
// of the job's waits since its delivery was fetched (its signal_seq grew;
// the signal's write updates the job's row, so a park that meets it waits
// for the row and reads the count the signal left), or the wait's name
// holds a resolution from before (a signal sent ahead of the wait). A
// CASE evaluates it for waiting outcomes only. The resolution is looked up
// by a scalar subquery, one probe of the primary key per park: an EXISTS
// may be planned as a hashed subplan, which reads all of twice_signals,
// and a plan cached while the table was small would keep doing that.
const parkResolvedSQL = `(j.signal_seq <> o.signal_seq
		OR (SELECT true FROM twice_signals AS s WHERE s.job_id = o.id AND s.name = o.wait_name) IS NOT NULL)`

// keptErrors is an expression for the error history arr with only its
// first twicestore.ErrorsKeptFirst and last twicestore.ErrorsKeptLast
// entries.
func keptErrors(arr string) string {
	return fmt.Sprintf(`(SELECT coalesce(jsonb_agg(t.e ORDER BY t.i), '[]'::jsonb)
		FROM jsonb_array_elements(%[1]s) WITH ORDINALITY AS t(e, i)
		WHERE t.i <= %[2]d OR t.i > jsonb_array_length(%[1]s) - %[3]d)`,
		arr, twicestore.ErrorsKeptFirst, twicestore.ErrorsKeptLast)
}

// cancelNoteSQL renders a job's cancel request as twicetype.CancelRequest's
// Note does.
const cancelNoteSQL = `('cancelled' || CASE WHEN j.cancel_by <> '' THEN ' by ' || j.cancel_by ELSE '' END ||
	CASE WHEN j.cancel_reason <> '' THEN ': ' || j.cancel_reason ELSE '' END)`

// JobFinish writes a batch of outcomes, and claims their markers, in one
// statement. A waiting outcome parks its job on its WaitName until its
// RunAt (zero: twicestore.WaitNever), or makes it available at once when
// the wait is resolved already (see finishSQL).
func (e *executor) JobFinish(ctx context.Context, p *twicestore.JobFinishParams) (*twicestore.JobFinishResult, error) {
	if slices.ContainsFunc(p.Outcomes, func(o *twicestore.JobOutcome) bool { return len(o.Children) > 0 }) {
		return e.finishWithChildren(ctx, p)
	}
	n := len(p.Outcomes)
	res := &twicestore.JobFinishResult{Applied: make([]bool, n)}
	if n == 0 {
		return res, nil
	}
	var (
		ids, epochs         = make([]int64, n), make([]int64, n)
		states, errs, notes = make([]string, n), make([]string, n), make([]string, n)
		runAts, finishedAts = make([]time.Time, n), make([]time.Time, n) // each used by its states only
		refunds, snoozes    = make([]bool, n), make([]bool, n)
		outputs             = make([]*string, n) // NULL keeps the job's output
		traces              = make([]string, n)
		waitNames           = make([]string, n)
		signalSeqs          = make([]int64, n)
		handlers, keys      []string
		processedAts        []time.Time
		claimants, claimEps []int64 // the job and epoch claiming each marker
	)
	// The outcomes go in id order: where the plan drives the update from
	// the arrays (the usual plan once the table is large), batches that
	// overlap (a late worker's and the current holder's) then lock their
	// rows in the same order instead of deadlocking. order[k] is the
	// outcome at position k.
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(p.Outcomes[a].ID, p.Outcomes[b].ID) })
	now := time.Now()
	for i, pos := range order {
		o := p.Outcomes[pos]
		switch o.State {
		case twicetype.JobStateAvailable:
			runAts[i], finishedAts[i] = nowOr(o.RunAt), now
			e.floors.loweredAt(runAts[i])
		case twicetype.JobStateWaiting:
			if err := twicestore.CheckWaitName(o.WaitName); err != nil {
				return nil, fmt.Errorf("finish job %d: park: %w", o.ID, err)
			}
			// finishedAts[i] is when a park whose wait is resolved
			// already makes the job due (see finishSQL).
			runAts[i], finishedAts[i] = o.RunAt, now
			if runAts[i].IsZero() {
				runAts[i] = twicestore.WaitNever
			}
			waitNames[i], signalSeqs[i] = o.WaitName, o.SignalSeq
			e.floors.loweredAt(now)
		case twicetype.JobStateCompleted, twicetype.JobStateDead, twicetype.JobStateCancelled:
			runAts[i], finishedAts[i] = now, nowOr(o.FinishedAt)
		default:
			return nil, fmt.Errorf("finish job %d: outcome state %q is not completed, available, waiting, dead or cancelled",
				o.ID, o.State)
		}
		if o.Error != nil {
			b, err := json.Marshal(o.Error)
			if err != nil {
				return nil, fmt.Errorf("finish job %d: encode error: %w", o.ID, err)
			}
			errs[i] = string(b)
		}
		ids[i], epochs[i], states[i], notes[i], refunds[i] = o.ID, o.Epoch, string(o.State), o.Note, o.RefundAttempt
		snoozes[i], traces[i] = o.Snooze, o.Trace
		if o.Output != nil {
			out := string(o.Output)
			outputs[i] = &out
		}
		if m := o.Marker; m != nil {
			at := m.Now
			if at.IsZero() {
				at = nowOr(o.FinishedAt)
			}
			handlers, keys, processedAts = append(handlers, m.Handler), append(keys, m.Key), append(processedAts, at)
			jobID, epoch := m.JobID, m.Epoch
			if jobID == 0 { // the claimant is the job finishing
				jobID, epoch = o.ID, o.Epoch
			}
			claimants, claimEps = append(claimants, jobID), append(claimEps, epoch)
		}
	}
	if handlers == nil { // a nil slice would be a NULL array
		handlers, keys, processedAts = []string{}, []string{}, []time.Time{}
		claimants, claimEps = []int64{}, []int64{}
	}
	rs, err := e.q.query(ctx, finishSQL, ids, epochs, states, runAts, refunds, errs, notes, finishedAts,
		handlers, keys, processedAts, claimants, claimEps, snoozes, outputs, traces, waitNames, signalSeqs)
	if err != nil {
		return nil, fmt.Errorf("finish jobs: %w", err)
	}
	for row, err := range dbrows.Iter(rs) {
		if err != nil {
			return nil, fmt.Errorf("finish jobs: %w", err)
		}
		var ord int64
		if err := row.Scan(&ord); err != nil {
			return nil, fmt.Errorf("finish jobs: %w", err)
		}
		if ord < 1 || ord > int64(n) {
			return nil, fmt.Errorf("finish jobs: returned position %d for %d outcomes", ord, n)
		}
		res.Applied[order[ord-1]] = true
	}
	return res, nil
}

// rescueSQL releases expired leases: cancelled when an operator asked to
// cancel the job, else back to available while attempts remain, dead
// otherwise, recording the lost attempt either way. SET
// expressions read the row as it was, so every CASE sees the old attempt.
// SKIP LOCKED lets rescuers on several nodes run at once, each taking
// other jobs, and keeps them from waiting on a worker finishing one. The
// update finds them by id = ANY, as the fetch does (fetchLeaseSQL).
var rescueSQL = `WITH expired AS (
	SELECT id FROM twice_jobs
	WHERE state = 'running' AND lease_until < $1
	ORDER BY lease_until, id
	LIMIT $3
	FOR UPDATE SKIP LOCKED
)
UPDATE twice_jobs AS j SET
	state = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
		WHEN j.attempt >= j.max_attempts THEN 'dead' ELSE 'available' END,
	finished_at = CASE WHEN j.cancel_requested_at IS NOT NULL OR j.attempt >= j.max_attempts THEN $1 END,
	note = CASE WHEN j.cancel_requested_at IS NOT NULL THEN ` + cancelNoteSQL + ` ELSE j.note END,
	lease_until = NULL,
	errors = ` + keptErrors(`j.errors || jsonb_build_array(jsonb_build_object(
		'attempt', j.attempt,
		'at', $2::text,
		'error', 'lease expired at ' || to_char(j.lease_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') ||
			' before node "' || j.attempted_by || '" finished the attempt'))`) + `
WHERE j.id = ANY(ARRAY(SELECT id FROM expired)) AND j.state IN ('available', 'running')
RETURNING ` + jobColumns

// JobRescue releases up to Limit expired leases (all of them when Limit is
// zero or less) in one statement.
func (e *executor) JobRescue(ctx context.Context, p *twicestore.JobRescueParams) (*twicestore.JobRescueResult, error) {
	now := nowOr(p.Now)
	jobs, err := queryJobs(ctx, e.q, rescueSQL, now, now.UTC().Format(time.RFC3339Nano), limitArg(p.Limit))
	if len(jobs) > 0 {
		e.floors.dropAll() // a rescued job keeps its place in the order
	}
	if err != nil {
		return nil, fmt.Errorf("rescue jobs: %w", err)
	}
	return driverkit.RescueResult(jobs), nil
}
