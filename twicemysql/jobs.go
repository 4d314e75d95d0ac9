package twicemysql

// The job's life: insert, fetch (lease), extend, finish, rescue, and the
// reads by id and by filter.

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// insertColumns are the columns JobInsertMany writes, one placeholder each
// in insertRowSQL.
const insertColumns = `kind, queue, priority, args, message_id, idempotency_key, correlation_id, unique_key,
	max_attempts, run_at, created_at, metadata, concurrency_key, parent_id, batch_id, unique_states`

// insertRowSQL is the VALUES tuple of one inserted job.
const insertRowSQL = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"

// insertChunk is how many jobs one multi-row INSERT carries at most.
const insertChunk = 500

// insertChunkBytes bounds the args one multi-row INSERT carries, far below
// max_allowed_packet (16 MiB on MariaDB, 64 MiB on MySQL 8): jobs whose
// payloads are large (Config.MaxArgsBytes raised) go in smaller
// statements rather than in one the server refuses.
const insertChunkBytes = 4 << 20

// chunkEnd returns the end of the chunk of jobs that starts at start: at
// most insertChunk jobs and, but for a single job, insertChunkBytes of
// args.
func chunkEnd(jobs []*twicestore.JobInsertParams, start int) int {
	end, size := start, 0
	for end < len(jobs) && end-start < insertChunk {
		size += len(jobs[end].Args) + len(jobs[end].Key) + len(jobs[end].MessageID)
		if end > start && size > insertChunkBytes {
			break
		}
		end++
	}
	return end
}

// replaceTries bounds the rounds of replaceHolder: each round that does not
// settle means another transaction leased, finished or inserted a holder
// in between.
const replaceTries = 50

// insertArgs validates j and returns its values in insertColumns' order.
// A zero CreatedAt is now and a zero RunAt is CreatedAt; a nil Args is an
// empty payload.
func insertArgs(j *twicestore.JobInsertParams, now time.Time) ([]any, error) {
	if len(j.ConcurrencyKey) > twicestore.MaxConcurrencyKeyBytes {
		return nil, fmt.Errorf("job of kind %q: %w (%d bytes, at most %d)", j.Kind,
			twicestore.ErrConcurrencyKeyTooLong, len(j.ConcurrencyKey), twicestore.MaxConcurrencyKeyBytes)
	}
	if err := j.UniqueStates.Validate(); err != nil {
		return nil, fmt.Errorf("job of kind %q: %w", j.Kind, err)
	}
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
		payload = []byte{}
	}
	return []any{j.Kind, j.Queue, j.Priority, payload, j.MessageID, j.Key, j.CorrelationID, j.UniqueKey,
		j.MaxAttempts, dbTime(runAt), dbTime(createdAt), metadataJSON(j.Metadata), j.ConcurrencyKey,
		nullID(j.ParentID), nullID(j.BatchID), int64(j.UniqueStates.OrDefault())}, nil
}

// JobInsertMany inserts the jobs in one transaction (or the caller's): a
// multi-row INSERT for each run of jobs without a unique key, one INSERT
// for each job with one. A job whose unique key a job of its kind holds
// (already stored, or earlier in the same batch) is not inserted and is
// reported with that job; a Replace job gives a waiting holder its args
// and run time.
//
// MySQL has no partial index: the unique index on (kind, unique_holder)
// refuses a taken key, and a concurrent inserter of the same key waits on
// the index for the other transaction's outcome, so a key is held once.
// INSERT IGNORE would also turn data errors into warnings; the refusal is
// read from ON DUPLICATE KEY UPDATE instead (see insertUniqueSQL).
func (e *executor) JobInsertMany(ctx context.Context, p *twicestore.JobInsertManyParams) (*twicestore.JobInsertManyResult, error) {
	res := &twicestore.JobInsertManyResult{Jobs: make([]*twicestore.JobInsertResult, len(p.Jobs))}
	if len(p.Jobs) == 0 {
		return res, nil
	}
	var out []*twicestore.JobInsertResult
	run := e.inTxUnsettled
	if len(p.Jobs) == 1 && p.Jobs[0].UniqueKey == "" {
		// One job with no unique key is one statement, atomic on its own:
		// no transaction, so no BEGIN and COMMIT round trips.
		run = func(_ context.Context, fn func(q dbtx) error) error { return mapError(fn(e.db)) }
	}
	err := run(ctx, func(q dbtx) (err error) {
		out, err = insertJobs(ctx, q, p.Jobs)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	res.Jobs = out
	return res, nil
}

// insertJobs is JobInsertMany's work in q's transaction: it inserts jobs
// (a multi-row INSERT per chunk of insertChunk), reports the duplicates of
// a held unique key with their holder, and replaces the holders of the
// Replace jobs. It returns a result per job, in input order. Other write
// paths that insert jobs (continuations, callbacks) use it too.
func insertJobs(ctx context.Context, q dbtx, jobs []*twicestore.JobInsertParams) ([]*twicestore.JobInsertResult, error) {
	out := make([]*twicestore.JobInsertResult, len(jobs))
	if len(jobs) == 0 {
		return out, nil
	}
	now := time.Now()
	values := make([][]any, len(jobs))
	for i, j := range jobs {
		v, err := insertArgs(j, now)
		if err != nil {
			return nil, err
		}
		values[i] = v
	}
	for start := 0; start < len(jobs); {
		end := chunkEnd(jobs, start)
		if err := insertChunkOf(ctx, q, jobs[start:end], values[start:end], out[start:end]); err != nil {
			return nil, err
		}
		start = end
	}
	for i, j := range jobs {
		if j.Replace && out[i].Duplicate {
			r, err := replaceHolder(ctx, q, j, values[i], out[i].Job)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
	}
	return out, nil
}

// insertChunkOf inserts jobs (with their values) and fills out, parallel
// to jobs, in input order (so ids ascend in it, and the first of a
// batch's repeats of a unique key holds it): each run of jobs without a
// unique key with one multi-row INSERT, each job with one alone (see
// insertUnique).
func insertChunkOf(ctx context.Context, q dbtx, jobs []*twicestore.JobInsertParams, values [][]any, out []*twicestore.JobInsertResult) error {
	for start := 0; start < len(jobs); {
		if jobs[start].UniqueKey != "" {
			r, err := insertUnique(ctx, q, jobs[start], values[start])
			if err != nil {
				return err
			}
			out[start] = r
			start++
			continue
		}
		end := start + 1
		for end < len(jobs) && jobs[end].UniqueKey == "" {
			end++
		}
		if err := insertPlain(ctx, q, jobs[start:end], values[start:end], out[start:end]); err != nil {
			return err
		}
		start = end
	}
	return nil
}

// insertPlain inserts jobs that have no unique key with one multi-row
// INSERT and fills out with their rows.
func insertPlain(ctx context.Context, q dbtx, jobs []*twicestore.JobInsertParams, values [][]any, out []*twicestore.JobInsertResult) error {
	var sb strings.Builder
	sb.WriteString("INSERT INTO twice_jobs (" + insertColumns + ") VALUES ")
	args := make([]any, 0, len(jobs)*len(values[0]))
	for i := range jobs {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(insertRowSQL)
		args = append(args, values[i]...)
	}
	r, err := q.ExecContext(ctx, sb.String(), args...)
	if err != nil {
		return err
	}
	first, err := r.LastInsertId()
	if err != nil {
		return err
	}
	if len(jobs) == 1 {
		// One row's id is the insert id: the row is what was bound, with
		// the columns' defaults, so it is not read back (the enqueue of one
		// job is one statement).
		out[0] = &twicestore.JobInsertResult{Job: insertedRow(first, jobs[0], values[0])}
		return nil
	}
	// A multi-row INSERT of known length (a "simple insert") takes its
	// AUTO_INCREMENT values in one allocation, consecutive from the first
	// in VALUES order, under innodb_autoinc_lock_mode 1 and 2 alike. The
	// rows are read back by that range and checked against the inputs.
	last := first + int64(len(jobs)) - 1
	rows, err := queryJobs(ctx, q, `SELECT `+jobColumns+` FROM twice_jobs WHERE id BETWEEN ? AND ? ORDER BY id`, first, last)
	if err != nil {
		return fmt.Errorf("read inserted jobs: %w", err)
	}
	if len(rows) != len(jobs) {
		return fmt.Errorf("read inserted jobs: %d rows in ids %d..%d for %d jobs", len(rows), first, last, len(jobs))
	}
	for i, row := range rows {
		if row.Kind != jobs[i].Kind || row.MessageID != jobs[i].MessageID {
			return fmt.Errorf("read inserted jobs: id %d is not the job inserted at position %d", row.ID, i)
		}
		out[i] = &twicestore.JobInsertResult{Job: row}
	}
	return nil
}

// insertedRow is the row insertPlain stored for j, with values its bound
// values (insertArgs) and id its id: as JobGet would read it back.
func insertedRow(id int64, j *twicestore.JobInsertParams, values []any) *twicetype.JobRow {
	row := &twicetype.JobRow{
		ID: id, Kind: j.Kind, Queue: j.Queue, Priority: j.Priority, Args: values[3].([]byte),
		MessageID: j.MessageID, Key: j.Key, CorrelationID: j.CorrelationID, UniqueKey: j.UniqueKey,
		State: twicetype.JobStateAvailable, MaxAttempts: j.MaxAttempts,
		RunAt: values[9].(time.Time), CreatedAt: values[10].(time.Time),
	}
	if len(j.Metadata) > 0 {
		row.Metadata = maps.Clone(j.Metadata)
	}
	return row
}

// insertUniqueSQL inserts one job with a unique key. When the unique index
// refuses it, the no-op update makes the statement change nothing (0 rows
// affected); insertUnique then reads the holder. Unlike INSERT
// IGNORE, it leaves every other error an error.
//
// It is ON DUPLICATE KEY UPDATE rather than a plain INSERT for its locks:
// a plain INSERT checks the unique index under shared locks, and
// inserters of one key that all find the entry a finished holder left
// (delete-marked until purged) all hold it shared and all wait to insert
// beside it: a deadlock among every one of them, again at each retry.
// This one takes the entry exclusively, so they queue: the first inserts,
// the others find its row (waiting for its commit) as their holder.
const insertUniqueSQL = "INSERT INTO twice_jobs (" + insertColumns + ") VALUES " + insertRowSQL +
	" ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id)"

// insertUnique inserts one job with a unique key, or reports the job of
// its kind holding the key (locked by the statement until the
// transaction ends, so it holds the key still when read).
func insertUnique(ctx context.Context, q dbtx, j *twicestore.JobInsertParams, values []any) (*twicestore.JobInsertResult, error) {
	r, err := q.ExecContext(ctx, insertUniqueSQL, values...)
	if err != nil {
		return nil, err
	}
	id, err := r.LastInsertId()
	if err != nil {
		return nil, err
	}
	n, err := r.RowsAffected()
	if err != nil {
		return nil, err
	}
	if n != 1 {
		// MariaDB reports no insert id for the no-op update when the table
		// has triggers (twice_jobs has, migration 002), so the holder is
		// read by the unique index; the statement locked it already.
		err := q.QueryRowContext(ctx, `SELECT id FROM twice_jobs WHERE kind = ? AND unique_holder = ? FOR UPDATE`,
			j.Kind, j.UniqueKey).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("job of kind %q with unique key %q: refused as a duplicate by another unique index", j.Kind, j.UniqueKey)
		}
		if err != nil {
			return nil, fmt.Errorf("find the holder of unique key %q: %w", j.UniqueKey, err)
		}
	}
	row, err := scanJob(q.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM twice_jobs WHERE id = ?`, id))
	if err != nil {
		return nil, fmt.Errorf("read job %d: %w", id, err)
	}
	if n == 1 {
		return &twicestore.JobInsertResult{Job: row}, nil
	}
	if row.Kind != j.Kind || row.UniqueKey != j.UniqueKey {
		return nil, fmt.Errorf("job of kind %q with unique key %q: refused as a duplicate of job %d, which is not its key's holder", j.Kind, j.UniqueKey, id)
	}
	return &twicestore.JobInsertResult{Job: row, Duplicate: true}, nil
}

// replaceHolder gives holder, which holds j's unique key, j's args and run
// time if it still waits to run. The holder's row is locked first, so a
// fetch leasing it at the same moment either comes before (the holder is
// running and stays as it is: a plain duplicate) or after (it runs with
// the new args). A holder that finished letting the key go is not one any
// more: j is inserted after all, or meets the new holder.
func replaceHolder(ctx context.Context, q dbtx, j *twicestore.JobInsertParams, values []any, holder *twicetype.JobRow) (*twicestore.JobInsertResult, error) {
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
		var (
			state string
			holds bool
		)
		err := q.QueryRowContext(ctx, `SELECT state, unique_holder IS NOT NULL FROM twice_jobs WHERE id = ? FOR UPDATE`,
			holder.ID).Scan(&state, &holds)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("replace job %d: %w", holder.ID, err)
		}
		if holds {
			if state == string(twicetype.JobStateAvailable) {
				if _, err := q.ExecContext(ctx, `UPDATE twice_jobs SET args = ?, run_at = ? WHERE id = ?`,
					payload, dbTime(runAt), holder.ID); err != nil {
					return nil, fmt.Errorf("replace job %d: %w", holder.ID, err)
				}
			}
			row, err := scanJob(q.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM twice_jobs WHERE id = ?`, holder.ID))
			if err != nil {
				return nil, fmt.Errorf("replace job %d: %w", holder.ID, err)
			}
			replaced := state == string(twicetype.JobStateAvailable)
			return &twicestore.JobInsertResult{Job: row, Duplicate: true, Replaced: replaced}, nil
		}
		// The holder let the key go (or was deleted): the insert tells
		// who holds it now.
		r, err := insertUnique(ctx, q, j, values)
		if err != nil || !r.Duplicate {
			return r, err
		}
		next := r.Job
		holder = next
	}
	return nil, fmt.Errorf("job of kind %q: its unique key's holder kept changing while it was replaced", j.Kind)
}

// fetchPickSQL picks the first due jobs of the queue and kinds in fetch
// order and locks them. SKIP LOCKED passes over the rows another fetch
// (or a finish, a cancel) holds, so concurrent fetchers take disjoint jobs
// without waiting; a locking read sees the latest committed version of a
// row, so a job another fetch leased and committed is no longer
// available here. FORCE INDEX keeps the walk on the fetch index, which
// yields rows in fetch order and stops at the LIMIT.
const fetchPickSQL = `SELECT ` + jobColumns + ` FROM twice_jobs FORCE INDEX (twice_jobs_fetch)
WHERE state = 'available' AND queue = ? AND run_at <= ? AND kind IN %s
ORDER BY priority, run_at, id
LIMIT ?
FOR UPDATE SKIP LOCKED`

// leaseSQL leases picked (and locked) jobs. A queue paused (with no until,
// or one still ahead) leases nothing: the pause is checked here rather
// than in the locking pick, where SKIP LOCKED would also skip a pause row
// being written and read the queue as not paused.
const leaseSQL = `UPDATE twice_jobs
SET attempt = attempt + 1, epoch = epoch + 1, lease_until = ?, attempted_by = ?, state = 'running'
WHERE id IN %s AND state = 'available'
	AND NOT EXISTS (SELECT 1 FROM twice_queue_pauses AS qp WHERE qp.queue = ? AND (qp.until IS NULL OR qp.until > ?))`

// JobFetch leases up to Limit due jobs of the queue and kinds: those of
// limited kinds first (see fetchLimited), then the plain kinds with what
// is left of the Limit. A Limit of zero or less, or no kinds, fetches
// nothing.
func (e *executor) JobFetch(ctx context.Context, p *twicestore.JobFetchParams) (*twicestore.JobFetchResult, error) {
	if p.Limit <= 0 || len(p.Kinds) == 0 {
		return &twicestore.JobFetchResult{}, nil
	}
	res := &twicestore.JobFetchResult{}
	limited, plain := p.LimitedKinds()
	if len(limited) > 0 {
		jobs, throttled, retryAt, err := e.fetchLimited(ctx, p, limited)
		if err != nil {
			return nil, fmt.Errorf("fetch queue %q: %w", p.Queue, err)
		}
		res.Jobs, res.Throttled, res.RetryAt = jobs, throttled, retryAt
	}
	if left := p.Limit - len(res.Jobs); left > 0 && len(plain) > 0 {
		var more []*twicetype.JobRow
		err := e.inTxUnsettled(ctx, func(q dbtx) (err error) {
			more, err = leaseJobs(ctx, q, p, plain, left)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("fetch queue %q: %w", p.Queue, err)
		}
		res.Jobs = append(res.Jobs, more...)
	}
	slices.SortFunc(res.Jobs, func(a, b *twicetype.JobRow) int {
		if a.Priority != b.Priority {
			return cmp.Compare(a.Priority, b.Priority)
		}
		if c := a.RunAt.Compare(b.RunAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	res.Processed = make([]bool, len(res.Jobs))
	if err := e.peekFetched(ctx, p.Peek, res); err != nil {
		return nil, fmt.Errorf("fetch queue %q: %w", p.Queue, err)
	}
	return res, nil
}

// leaseJobs picks up to limit due jobs of kinds in q's transaction, leases
// them and returns them leased. The pick reads the whole rows it locks, and
// the lease's changes are applied to them here, so a fetch is two
// statements, not three.
func leaseJobs(ctx context.Context, q dbtx, p *twicestore.JobFetchParams, kinds []string, limit int) ([]*twicetype.JobRow, error) {
	now := dbTime(nowOr(p.Now))
	kindList, kindArgs := in(kinds)
	picked, err := queryJobs(ctx, q, fmt.Sprintf(fetchPickSQL, kindList),
		append(append([]any{p.Queue, now}, kindArgs...), limit)...)
	if err != nil || len(picked) == 0 {
		return nil, err
	}
	ids := make([]int64, len(picked))
	for i, j := range picked {
		ids[i] = j.ID
	}
	n, err := lease(ctx, q, p, now, ids)
	switch {
	case err != nil || n == 0: // an error, or the queue is paused
		return nil, err
	case n != int64(len(picked)):
		// Not expected: the pick locked every row it read. Read back what
		// the lease wrote rather than guess.
		list, args := in(ids)
		return queryJobs(ctx, q, `SELECT `+jobColumns+` FROM twice_jobs WHERE id IN `+list+` AND state = 'running'`, args...)
	}
	leaseUntil := dbTime(p.LeaseUntil)
	for _, j := range picked {
		j.Attempt++
		j.Epoch++
		j.LeaseUntil = leaseUntil
		j.AttemptedBy = p.Node
		j.State = twicetype.JobStateRunning
	}
	return picked, nil
}

// lease runs leaseSQL on the picked (and locked) jobs ids and returns how
// many it leased: all of them, or none when the queue is paused.
func lease(ctx context.Context, q dbtx, p *twicestore.JobFetchParams, now time.Time, ids []int64) (int64, error) {
	idList, idArgs := in(ids)
	args := append([]any{dbTime(p.LeaseUntil), p.Node}, idArgs...)
	r, err := q.ExecContext(ctx, fmt.Sprintf(leaseSQL, idList), append(args, p.Queue, now)...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// leaseIDs leases the picked jobs ids (locked by the caller's pick) unless
// the queue is paused, and returns the jobs leased.
func leaseIDs(ctx context.Context, q dbtx, p *twicestore.JobFetchParams, now time.Time, ids []int64) ([]*twicetype.JobRow, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	if n, err := lease(ctx, q, p, now, ids); err != nil || n == 0 {
		return nil, err
	}
	idList, idArgs := in(ids)
	return queryJobs(ctx, q, `SELECT `+jobColumns+` FROM twice_jobs WHERE id IN `+idList+` AND state = 'running'`, idArgs...)
}

// peekFetched sets res.Processed for the leased jobs whose kind peek names:
// whether the marker of the job's key under that handler exists.
func (e *executor) peekFetched(ctx context.Context, peek map[string]string, res *twicestore.JobFetchResult) error {
	var (
		conds []string
		args  []any
	)
	for _, j := range res.Jobs {
		if h, ok := peek[j.Kind]; ok {
			conds = append(conds, "(handler = ? AND `key` = ?)")
			args = append(args, h, j.Key)
		}
	}
	if len(conds) == 0 {
		return nil
	}
	rows, err := e.db.QueryContext(ctx, "SELECT handler, `key` FROM twice_markers WHERE "+strings.Join(conds, " OR "), args...)
	if err != nil {
		return fmt.Errorf("peek markers: %w", err)
	}
	found := map[[2]string]bool{}
	err = dbrows.Each(rows, func(r dbrows.Scanner) error {
		var h, k string
		if err := r.Scan(&h, &k); err != nil {
			return err
		}
		found[[2]string{h, k}] = true
		return nil
	})
	if err != nil {
		return fmt.Errorf("peek markers: %w", err)
	}
	for i, j := range res.Jobs {
		if h, ok := peek[j.Kind]; ok {
			res.Processed[i] = found[[2]string{h, j.Key}]
		}
	}
	return nil
}

// JobExtendLease moves the lease of the jobs still running under their
// epochs. A lease is extended under a lock of its job's row, so an outcome
// being written at the same moment (which locks the row too) either comes
// first, and the lease is not extended, or after. It takes two passes: the
// first extends, and commits, every lease whose row no one else holds
// (SKIP LOCKED), so a row held by a slow finish does not keep the others'
// leases from being extended before the heartbeat gives up; the second
// waits for the rows that were held. When the second times out, the first
// has been written all the same: the jobs it covered keep their leases.
func (e *executor) JobExtendLease(ctx context.Context, p *twicestore.JobExtendLeaseParams) (*twicestore.JobExtendLeaseResult, error) {
	res := &twicestore.JobExtendLeaseResult{}
	if len(p.Leases) == 0 {
		return res, nil
	}
	passes := []string{"FOR UPDATE SKIP LOCKED", "FOR UPDATE"}
	if e.pool == nil {
		passes = passes[1:] // inside a transaction: one pass, which waits
	}
	leases := p.Leases
	for _, lock := range passes {
		var extended, cancelled []int64
		err := e.inTxUnsettled(ctx, func(q dbtx) (err error) {
			extended, cancelled, err = extendLeases(ctx, q, leases, p.LeaseUntil, lock)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("extend leases: %w", err)
		}
		res.Extended = append(res.Extended, extended...)
		res.CancelRequested = append(res.CancelRequested, cancelled...)
		done := make(map[int64]bool, len(extended))
		for _, id := range extended {
			done[id] = true
		}
		leases = slices.DeleteFunc(slices.Clone(leases), func(l twicestore.JobLease) bool { return done[l.ID] })
		if len(leases) == 0 {
			break
		}
	}
	slices.Sort(res.Extended)
	slices.Sort(res.CancelRequested)
	return res, nil
}

// extendLeases locks (with lock, a locking clause) the jobs of leases
// still running under their epochs and moves their lease to until. It
// returns the jobs extended and, among them, those an operator asked to
// cancel.
func extendLeases(ctx context.Context, q dbtx, leases []twicestore.JobLease, until time.Time, lock string) (extended, cancelled []int64, err error) {
	ids := make([]int64, len(leases))
	pairs := make([]string, len(leases))
	args := make([]any, 0, 2*len(leases))
	for i, l := range leases {
		ids[i] = l.ID
		pairs[i] = "(?, ?)"
		args = append(args, l.ID, l.Epoch)
	}
	idList, idArgs := in(ids)
	rows, err := q.QueryContext(ctx, `SELECT id, cancel_requested_at IS NOT NULL FROM twice_jobs
		WHERE id IN `+idList+` AND (id, epoch) IN (`+strings.Join(pairs, ", ")+`) AND state = 'running'
		ORDER BY id `+lock, append(slices.Clone(idArgs), args...)...)
	if err != nil {
		return nil, nil, err
	}
	err = dbrows.Each(rows, func(r dbrows.Scanner) error {
		var (
			id        int64
			requested bool
		)
		if err := r.Scan(&id, &requested); err != nil {
			return err
		}
		extended = append(extended, id)
		if requested {
			cancelled = append(cancelled, id)
		}
		return nil
	})
	if err != nil || len(extended) == 0 {
		return nil, nil, err
	}
	list, largs := in(extended)
	_, err = q.ExecContext(ctx, `UPDATE twice_jobs SET lease_until = ? WHERE id IN `+list,
		append([]any{dbTime(until)}, largs...)...)
	if err != nil {
		return nil, nil, err
	}
	return extended, cancelled, nil
}

// appendErrorSQL is the error history errors with the JSON array ? (one
// element) appended, keeping its first twicestore.ErrorsKeptFirst and last
// twicestore.ErrorsKeptLast entries. Every write that appends keeps the
// history trimmed, so an append is one over at most: the entry after the
// first ones is dropped.
var appendErrorSQL = fmt.Sprintf(`CASE WHEN JSON_LENGTH(errors) + 1 > %[1]d
	THEN JSON_REMOVE(JSON_MERGE_PRESERVE(errors, %%s), '$[%[2]d]')
	ELSE JSON_MERGE_PRESERVE(errors, %%s) END`, twicestore.ErrorsKeptFirst+twicestore.ErrorsKeptLast, twicestore.ErrorsKeptFirst)

// appendError returns appendErrorSQL for the appended array expr.
func appendError(expr string) string { return fmt.Sprintf(appendErrorSQL, expr, expr) }

// cancelNoteSQL renders a job's cancel request as twicetype.CancelRequest's
// Note does.
const cancelNoteSQL = `CONCAT('cancelled', CASE WHEN cancel_by <> '' THEN CONCAT(' by ', cancel_by) ELSE '' END,
	CASE WHEN cancel_reason <> '' THEN CONCAT(': ', cancel_reason) ELSE '' END)`

// finishSQL writes one outcome, fenced by state and epoch (JobFinish runs
// it as finishJoinedSQL, many outcomes a statement): a worker whose
// lease was lost (rescued, perhaps fetched again under a newer epoch)
// writes nothing. MySQL evaluates SET assignments left to right, each
// seeing the columns assigned before it, so no assignment reads a column
// assigned earlier, and state (which the fence and the park's CASE read as
// it was) is assigned last.
//
// Parameters: 1 state, 2 run_at, 3 refund (0/1), 4 error as a one-element
// JSON array or NULL, 5 note, 6 finished_at, 7 snooze (0/1), 8 output or
// NULL, 9 trace, 10 signal_seq, 11 wait_name, 12 a park's due time should
// its wait be resolved already, then the fence: 13 id, 14 epoch. A park
// ('waiting') waits on wait_name until run_at (its timer); but when the
// job's signal_seq is no longer the one its delivery was fetched with, a
// signal or a timer resolved one of its waits while the handler ran, and
// the job is made available at once, so its handler reads what arrived.
var finishSQL = `UPDATE twice_jobs SET
	run_at = CASE WHEN ?1 = 'available' THEN ?2
		WHEN ?1 = 'waiting' THEN CASE WHEN signal_seq <> ?10 THEN ?12 ELSE ?2 END
		ELSE run_at END,
	wait_name = CASE WHEN ?1 = 'waiting' THEN ?11 ELSE wait_name END,
	attempt = GREATEST(attempt - ?3, 0),
	snoozes = snoozes + ?7,
	lease_until = NULL,
	errors = CASE WHEN ?4 IS NULL THEN errors ELSE ` + appendError("?4") + ` END,
	note = CASE WHEN ?1 = 'cancelled' AND ?5 = '' AND cancel_requested_at IS NOT NULL THEN ` + cancelNoteSQL + ` ELSE ?5 END,
	finished_at = ?6,
	output = CASE WHEN ?1 = 'completed' AND ?8 IS NOT NULL THEN ?8 ELSE output END,
	trace = ?9,
	state = CASE WHEN ?1 = 'waiting' AND signal_seq <> ?10 THEN 'available' ELSE ?1 END
WHERE id = ?13 AND state = 'running' AND epoch = ?14`

// numbered rewrites a statement's ?N parameters (which MySQL does not
// have) to plain ?s and returns, for each, the index of its argument.
func numbered(query string) (string, []int) {
	var (
		sb    strings.Builder
		order []int
	)
	for i := 0; i < len(query); i++ {
		c := query[i]
		if c != '?' {
			sb.WriteByte(c)
			continue
		}
		n, j := 0, i+1
		for j < len(query) && query[j] >= '0' && query[j] <= '9' {
			n = n*10 + int(query[j]-'0')
			j++
		}
		sb.WriteByte('?')
		order = append(order, n-1)
		i = j - 1
	}
	return sb.String(), order
}

// finishParams is the number of finishSQL's parameters.
const finishParams = 14

// JobFinish writes a batch of outcomes in one transaction: it locks the
// jobs still running under the outcomes' epochs (in id order, so
// overlapping batches, a late worker's and the current holder's, wait for
// each other instead of deadlocking), claims the outcomes' markers
// whatever the fence says (the effect they record has happened even when
// the lease was lost), and writes every outcome that holds its lease in
// one UPDATE of the jobs joined with the outcomes (finishChunk at a time):
// a batch of a hundred outcomes is four statements, not a hundred and
// three.
func (e *executor) JobFinish(ctx context.Context, p *twicestore.JobFinishParams) (*twicestore.JobFinishResult, error) {
	n := len(p.Outcomes)
	res := &twicestore.JobFinishResult{Applied: make([]bool, n)}
	if n == 0 {
		return res, nil
	}
	now := time.Now()
	args := make([][]any, n)
	for i, o := range p.Outcomes {
		var runAt, finishedAt, wokeAt any
		switch o.State {
		case twicetype.JobStateAvailable:
			runAt = dbTime(orTime(o.RunAt, now))
		case twicetype.JobStateWaiting:
			if err := twicestore.CheckWaitName(o.WaitName); err != nil {
				return nil, fmt.Errorf("finish job %d: %w", o.ID, err)
			}
			timer := o.RunAt
			if timer.IsZero() {
				timer = twicestore.WaitNever
			}
			runAt = dbTime(timer)
			wokeAt = dbTime(orTime(o.FinishedAt, now))
		case twicetype.JobStateCompleted, twicetype.JobStateDead, twicetype.JobStateCancelled:
			finishedAt = dbTime(orTime(o.FinishedAt, now))
		default:
			return nil, fmt.Errorf("finish job %d: outcome state %q is not completed, available, waiting, dead or cancelled", o.ID, o.State)
		}
		var errJSON any
		if o.Error != nil {
			b, err := json.Marshal([]*twicetype.AttemptError{o.Error})
			if err != nil {
				return nil, fmt.Errorf("finish job %d: encode error: %w", o.ID, err)
			}
			errJSON = string(b)
		}
		var output any
		if o.Output != nil {
			output = o.Output
		}
		args[i] = []any{string(o.State), runAt, boolInt(o.RefundAttempt), errJSON, o.Note, finishedAt,
			boolInt(o.Snooze), output, o.Trace, o.SignalSeq, o.WaitName, wokeAt, o.ID, o.Epoch}
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(p.Outcomes[a].ID, p.Outcomes[b].ID) })
	ids := make([]int64, n)
	for i, o := range p.Outcomes {
		ids[i] = o.ID
	}
	// Composition is settled here, only when an outcome moved a job of a
	// batch or workflow to a finished state: inTx would look every time.
	err := e.inTxUnsettled(ctx, func(q dbtx) error {
		clear(res.Applied)
		res.Inserted = false
		held, err := lockLeases(ctx, q, ids)
		if err != nil {
			return err
		}
		claimedHere := make([]bool, n) // this call stored the outcome's marker
		for _, i := range order {
			o := p.Outcomes[i]
			if o.Marker == nil {
				continue
			}
			m := *o.Marker
			if m.Now.IsZero() {
				m.Now = nowOr(o.FinishedAt)
			}
			if m.JobID == 0 { // the claimant is the job finishing
				m.JobID, m.Epoch = o.ID, o.Epoch
			}
			cr, err := claimMarker(ctx, q, &m)
			if err != nil {
				return fmt.Errorf("job %d: %w", o.ID, err)
			}
			claimedHere[i] = !cr.AlreadyProcessed
		}
		var apply []int
		written := make(map[int64]bool, n)
		for _, i := range order {
			o := p.Outcomes[i]
			if l, ok := held[o.ID]; ok && l.epoch == o.Epoch && !written[o.ID] {
				apply = append(apply, i) // a second outcome of a job finds it finished
				written[o.ID], res.Applied[i] = true, true
			}
		}
		for start := 0; start < len(apply); start += finishChunk {
			if err := finishJoined(ctx, q, args, apply[start:min(start+finishChunk, len(apply))]); err != nil {
				return err
			}
		}
		// The jobs the finishes make due in batches and workflows go in
		// first, then the continuations, in the order the triggers of the
		// other drivers insert them in.
		settle := false
		for _, i := range apply {
			o := p.Outcomes[i]
			if held[o.ID].composed && o.State != twicetype.JobStateAvailable && o.State != twicetype.JobStateWaiting {
				settle = true
			}
		}
		if settle {
			inserted, err := settleDue(ctx, q)
			if err != nil {
				return err
			}
			res.Inserted = inserted > 0
		}
		for _, i := range order {
			o := p.Outcomes[i]
			if len(o.Children) > 0 {
				if err := insertChildren(ctx, q, o, res.Applied[i], claimedHere[i]); err != nil {
					return fmt.Errorf("job %d: %w", o.ID, err)
				}
				res.Inserted = res.Inserted || driverkit.ChildrenEarned(o, res.Applied[i], claimedHere[i])
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("finish jobs: %w", err)
	}
	return res, nil
}

// finishChunk is how many outcomes one joined UPDATE writes.
const finishChunk = 100

// leaseHeld is what lockLeases read of a running job.
type leaseHeld struct {
	epoch    int64
	composed bool // in a batch or a workflow
}

// lockLeases locks, in id order, the jobs of ids that are running, and
// returns their epochs: an outcome applies exactly when its epoch is the
// one read, since the lock keeps the job running under it until commit.
func lockLeases(ctx context.Context, q dbtx, ids []int64) (map[int64]leaseHeld, error) {
	list, args := in(ids)
	rows, err := q.QueryContext(ctx, `SELECT id, epoch, batch_id IS NOT NULL OR workflow_id IS NOT NULL
		FROM twice_jobs WHERE id IN `+list+` AND state = 'running' ORDER BY id FOR UPDATE`, args...)
	if err != nil {
		return nil, err
	}
	held := make(map[int64]leaseHeld, len(ids))
	err = dbrows.Each(rows, func(r dbrows.Scanner) error {
		var (
			id int64
			l  leaseHeld
		)
		if err := r.Scan(&id, &l.epoch, &l.composed); err != nil {
			return err
		}
		held[id] = l
		return nil
	})
	return held, err
}

// finishJoinedSQL is finishSQL for many outcomes at once: the jobs joined
// with a derived table of the outcomes (one SELECT of finishSQL's
// parameters a row, as columns c1 to c14, UNION ALL'd), so its SET clause
// is finishSQL's with ?N read from v.cN. A multi-table UPDATE assigns in
// no set order; finishSQL reads no column another of its assignments
// writes, so the order does not matter.
var finishJoinedSQL = `UPDATE twice_jobs AS j JOIN (%s) AS v ON j.id = v.c13
SET ` + regexp.MustCompile(`\?(\d+)`).ReplaceAllString(
	finishSQL[strings.Index(finishSQL, "SET")+len("SET"):strings.Index(finishSQL, "\nWHERE")], "v.c$1") + `
WHERE j.state = 'running' AND j.epoch = v.c14`

// finishJoined writes the outcomes apply (indexes into args, each
// finishSQL's numbered parameters) in one statement.
func finishJoined(ctx context.Context, q dbtx, args [][]any, apply []int) error {
	var sb strings.Builder
	values := make([]any, 0, len(apply)*finishParams)
	for k, i := range apply {
		if k == 0 {
			sb.WriteString("SELECT ")
			for c := 1; c <= finishParams; c++ {
				if c > 1 {
					sb.WriteString(", ")
				}
				fmt.Fprintf(&sb, "? AS c%d", c)
			}
		} else {
			sb.WriteString(" UNION ALL SELECT " + strings.TrimSuffix(strings.Repeat("?, ", finishParams), ", "))
		}
		values = append(values, args[i]...)
	}
	_, err := q.ExecContext(ctx, fmt.Sprintf(finishJoinedSQL, sb.String()), values...)
	return err
}

// orTime returns t, or def when t is zero.
func orTime(t, def time.Time) time.Time {
	if t.IsZero() {
		return def
	}
	return t
}

// boolInt binds a bool as the 0 or 1 MySQL's arithmetic takes.
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// rescuePickSQL picks up to ? expired leases and locks them; SKIP LOCKED
// lets rescuers on several nodes run at once, each taking other jobs, and
// keeps them from waiting on a worker finishing one.
const rescuePickSQL = `SELECT id FROM twice_jobs
WHERE state = 'running' AND lease_until < ?
ORDER BY lease_until, id
LIMIT ?
FOR UPDATE SKIP LOCKED`

// rescueSQL releases the picked expired leases: cancelled when an operator
// asked to cancel the job, else back to available while attempts remain,
// dead otherwise, recording the lost attempt either way. MySQL evaluates
// SET assignments left to right, each seeing the ones before: errors and
// note (which read lease_until and the old state) come before the columns
// they read are assigned, and state comes last.
var rescueSQL = `UPDATE twice_jobs SET
	errors = ` + appendError(`JSON_ARRAY(JSON_OBJECT(
		'attempt', attempt,
		'at', ?,
		'error', CONCAT('lease expired at ', DATE_FORMAT(lease_until, '%Y-%m-%dT%H:%i:%s.%fZ'),
			' before node "', attempted_by, '" finished the attempt')))`) + `,
	finished_at = CASE WHEN cancel_requested_at IS NOT NULL OR attempt >= max_attempts THEN ? ELSE NULL END,
	note = CASE WHEN cancel_requested_at IS NOT NULL THEN ` + cancelNoteSQL + ` ELSE note END,
	lease_until = NULL,
	state = CASE WHEN cancel_requested_at IS NOT NULL THEN 'cancelled'
		WHEN attempt >= max_attempts THEN 'dead' ELSE 'available' END
WHERE id IN {ids} AND state = 'running'`

// JobRescue releases up to Limit expired leases (all of them when Limit is
// zero or less) in one transaction: the expired leases are picked and
// locked, released, and read back.
func (e *executor) JobRescue(ctx context.Context, p *twicestore.JobRescueParams) (*twicestore.JobRescueResult, error) {
	limit := int64(p.Limit)
	if limit <= 0 {
		limit = 1<<63 - 1
	}
	now := nowOr(p.Now)
	var jobs []*twicetype.JobRow
	err := e.inTx(ctx, func(q dbtx) error {
		rows, err := q.QueryContext(ctx, rescuePickSQL, dbTime(now), limit)
		if err != nil {
			return err
		}
		ids, err := dbrows.Collect(rows, dbrows.One[int64])
		if err != nil || len(ids) == 0 {
			jobs = nil
			return err
		}
		list, args := in(ids)
		at := now.UTC().Format(time.RFC3339Nano)
		// appendError repeats its expression: the error's "at" twice.
		if _, err := q.ExecContext(ctx, strings.Replace(rescueSQL, "{ids}", list, 1),
			append([]any{at, at, dbTime(now)}, args...)...); err != nil {
			return err
		}
		jobs, err = queryJobs(ctx, q, `SELECT `+jobColumns+` FROM twice_jobs WHERE id IN `+list+` ORDER BY id`, args...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("rescue jobs: %w", err)
	}
	return driverkit.RescueResult(jobs), nil
}

// JobGet returns one job, or an error wrapping twicestore.ErrNotFound.
func (e *executor) JobGet(ctx context.Context, p *twicestore.JobGetParams) (*twicetype.JobRow, error) {
	j, err := scanJob(e.db.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM twice_jobs WHERE id = ?`, p.ID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("get job %d: %w", p.ID, twicestore.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get job %d: %w", p.ID, err)
	}
	return j, nil
}

// filterSQL renders f as conditions joined by AND (always at least one),
// with their arguments (driverkit.FilterSQL in MySQL's dialect). The filter
// must have passed Validate.
func filterSQL(f twicestore.JobFilter) (string, []any) { return driverkit.FilterSQL(f, filterDialect) }

// filterDialect is MySQL's for driverkit.FilterSQL. A metadata pair is
// looked up among the job's own: no index can hold every key a job may
// carry, so a metadata filter reads the jobs the other conditions leave.
// The member is found by metadataPath and its value compared decoded
// (JSON_UNQUOTE) and as bytes. Not JSON_CONTAINS: MariaDB compares strings
// as they are escaped, and encoding/json escapes <, >, & and U+2028 as
// \u003c…, which JSON_OBJECT does not.
var filterDialect = driverkit.FilterDialect{
	IDs: func(ids []int64) (string, []any) {
		list, args := in(ids)
		return "id IN " + list, args
	},
	Time: func(t time.Time) any { return dbTime(t) },
	Metadata: func(key, value string) (string, []any) {
		return "JSON_UNQUOTE(JSON_EXTRACT(metadata, ?)) = CAST(? AS BINARY)", []any{metadataPath(key), value}
	},
}

// JobList lists matching jobs newest first (by id, descending). BeforeID
// continues from a previous page; a Limit of zero or less lists them all.
func (e *executor) JobList(ctx context.Context, p *twicestore.JobListParams) (*twicestore.JobListResult, error) {
	if err := p.Filter.Validate(); err != nil {
		return nil, err
	}
	where, args := filterSQL(p.Filter)
	if p.BeforeID > 0 {
		where += " AND id < ?"
		args = append(args, p.BeforeID)
	}
	query := `SELECT ` + jobColumns + ` FROM twice_jobs WHERE ` + where + ` ORDER BY id DESC`
	if p.Limit > 0 {
		query += " LIMIT ?"
		args = append(args, p.Limit)
	}
	jobs, err := queryJobs(ctx, e.db, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return &twicestore.JobListResult{Jobs: jobs}, nil
}

// JobCount counts matching jobs grouped by state, queue and kind, in that
// order (by bytes: the columns are binary).
func (e *executor) JobCount(ctx context.Context, p *twicestore.JobCountParams) (*twicestore.JobCountResult, error) {
	if err := p.Filter.Validate(); err != nil {
		return nil, err
	}
	where, args := filterSQL(p.Filter)
	rows, err := e.db.QueryContext(ctx, `SELECT state, queue, kind, COUNT(*) FROM twice_jobs WHERE `+where+`
		GROUP BY state, queue, kind ORDER BY state, queue, kind`, args...)
	if err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	counts, err := dbrows.Collect(rows, driverkit.ScanJobCount)
	if err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	return &twicestore.JobCountResult{Counts: counts}, nil
}
