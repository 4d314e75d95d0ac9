package twicesqlite

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

// jobColumns is the column list every job query returns:
// driverkit.JobColumnNames, in scanJob's order.
const jobColumns = `id, kind, queue, priority, args, message_id, idempotency_key, correlation_id,
	unique_key, state, attempt, max_attempts, epoch, run_at, lease_until, attempted_by,
	errors, note, created_at, finished_at, metadata, cancel_requested_at, cancel_by, cancel_reason, snoozes, trace,
	wait_name, signal_seq`

// rowScanner is one row of a result: dbrows.Scanner, so the driver's scan
// functions serve dbrows.Collect as they are.
type rowScanner = dbrows.Scanner

// scanJob reads one row of jobColumns, its times as unix microseconds.
func scanJob(r rowScanner) (*twicetype.JobRow, error) {
	return driverkit.ScanJob(driverkit.MicrosTimes, r)
}

// queryJobs runs a query returning jobColumns and scans every row.
func queryJobs(ctx context.Context, q dbtx, query string, args ...any) ([]*twicetype.JobRow, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	var jobs []*twicetype.JobRow
	for row, err := range dbrows.Iter(rows) {
		if err != nil {
			return nil, err
		}
		j, err := scanJob(row)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// jsonArg encodes v for a json_each(?) parameter. Lists travel as one JSON
// text parameter so no statement depends on their length, which keeps
// statements cacheable and clear of SQLite's bound-variable limit.
func jsonArg(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only slices of strings, integers and string pairs are passed
	}
	return string(b)
}

// metadataJSON encodes job metadata for its column; none is "{}".
func metadataJSON(m map[string]string) string {
	if len(m) == 0 {
		return "{}"
	}
	b, _ := json.Marshal(m) // a map of strings always encodes
	return string(b)
}

// insertColumnCount is the number of values bound per inserted row.
const insertColumnCount = 16

// insertChunk is how many rows one INSERT carries: 500 rows × 16 values stays
// far below SQLite's bound-variable limit (32766 since 3.32).
const insertChunk = 500

// JobInsertMany inserts the jobs with one multi-row INSERT per chunk of
// insertChunk, inside one transaction (unless it is inside one already, or
// the batch is one statement with no unique keys to look up). A job whose unique key a job of its
// kind holds (one in a state among its own unique_states, migration 014:
// already stored, or earlier in the same batch) is skipped by ON CONFLICT
// DO NOTHING and reported with that job.
//
// A zero CreatedAt is the current time and a zero RunAt is CreatedAt; a nil
// Args is stored as an empty payload.
func (e *executor) JobInsertMany(ctx context.Context, p *twicestore.JobInsertManyParams) (*twicestore.JobInsertManyResult, error) {
	res := &twicestore.JobInsertManyResult{Jobs: make([]*twicestore.JobInsertResult, len(p.Jobs))}
	if len(p.Jobs) == 0 {
		return res, nil
	}
	// One statement is atomic on its own; a transaction is needed only to
	// span chunks, or to find the stored duplicates in the state the
	// INSERT saw.
	run := e.inTx
	if len(p.Jobs) <= insertChunk && !slices.ContainsFunc(p.Jobs, func(j *twicestore.JobInsertParams) bool { return j.UniqueKey != "" }) {
		run = e.direct
	}
	err := run(ctx, func(q dbtx) error {
		for start := 0; start < len(p.Jobs); start += insertChunk {
			end := min(start+insertChunk, len(p.Jobs))
			if err := insertChunkOf(ctx, q, p.Jobs[start:end], res.Jobs[start:end]); err != nil {
				return err
			}
			if err := replaceHolders(ctx, q, p.Jobs[start:end], res.Jobs[start:end]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	return res, nil
}

type uniqueRef struct{ kind, key string }

// insertChunkOf inserts jobs and fills out, which is parallel to jobs.
func insertChunkOf(ctx context.Context, q dbtx, jobs []*twicestore.JobInsertParams, out []*twicestore.JobInsertResult) error {
	var sb strings.Builder
	sb.WriteString(`INSERT INTO twice_jobs (kind, queue, priority, args, message_id, idempotency_key,
	correlation_id, unique_key, max_attempts, run_at, created_at, metadata, concurrency_key, parent_id, batch_id,
	unique_states) VALUES `)
	args := make([]any, 0, len(jobs)*insertColumnCount)
	now := time.Now()
	for i, j := range jobs {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
		if len(j.ConcurrencyKey) > twicestore.MaxConcurrencyKeyBytes {
			return fmt.Errorf("job of kind %q: %w (%d bytes, at most %d)", j.Kind,
				twicestore.ErrConcurrencyKeyTooLong, len(j.ConcurrencyKey), twicestore.MaxConcurrencyKeyBytes)
		}
		if err := j.UniqueStates.Validate(); err != nil {
			return fmt.Errorf("job of kind %q: %w", j.Kind, err)
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
		args = append(args, j.Kind, j.Queue, j.Priority, payload, j.MessageID, j.Key,
			j.CorrelationID, j.UniqueKey, j.MaxAttempts, micros(runAt), micros(createdAt), metadataJSON(j.Metadata), j.ConcurrencyKey,
			nullID(j.ParentID), nullID(j.BatchID), int64(j.UniqueStates.OrDefault()))
	}
	sb.WriteString(" ON CONFLICT DO NOTHING RETURNING ")
	sb.WriteString(jobColumns)

	inserted, err := queryJobs(ctx, q, sb.String(), args...)
	if err != nil {
		return err
	}
	// RETURNING order is unspecified, but ids are: AUTOINCREMENT hands them
	// out in VALUES order within the statement. So the inserted rows sorted
	// by id line up with the inputs that were not skipped, in input order.
	slices.SortFunc(inserted, func(a, b *twicetype.JobRow) int { return cmp.Compare(a.ID, b.ID) })

	// An input was skipped exactly when its unique key is taken: by an
	// earlier input of this batch that was inserted, or by a stored job.
	taken := map[uniqueRef]*twicetype.JobRow{}
	for _, row := range inserted {
		if row.UniqueKey != "" {
			taken[uniqueRef{row.Kind, row.UniqueKey}] = row
		}
	}
	claimed := map[uniqueRef]bool{}
	var stored []uniqueRef
	next := 0
	for i, j := range jobs {
		if j.UniqueKey != "" {
			ref := uniqueRef{j.Kind, j.UniqueKey}
			row, ok := taken[ref]
			switch {
			case !ok:
				stored = append(stored, ref) // filled in below
				continue
			case claimed[ref]:
				out[i] = &twicestore.JobInsertResult{Job: row, Duplicate: true}
				continue
			}
			claimed[ref] = true
		}
		if next >= len(inserted) || (j.UniqueKey != "" && inserted[next] != taken[uniqueRef{j.Kind, j.UniqueKey}]) {
			return fmt.Errorf("insert returned rows out of input order")
		}
		out[i] = &twicestore.JobInsertResult{Job: inserted[next]}
		next++
	}
	if next != len(inserted) {
		return fmt.Errorf("insert returned %d rows, expected %d", len(inserted), next)
	}
	if len(stored) == 0 {
		return nil
	}

	pairs := make([][2]string, len(stored))
	for i, ref := range stored {
		pairs[i] = [2]string{ref.kind, ref.key}
	}
	existing, err := queryJobs(ctx, q, `SELECT `+jobColumns+` FROM twice_jobs INDEXED BY twice_jobs_unique
		WHERE (kind, unique_key) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?))
		AND `+driverkit.UniqueHeldSQL(""), jsonArg(pairs))
	if err != nil {
		return fmt.Errorf("look up duplicates: %w", err)
	}
	for _, row := range existing {
		taken[uniqueRef{row.Kind, row.UniqueKey}] = row
	}
	for i, j := range jobs {
		if out[i] != nil {
			continue
		}
		row, ok := taken[uniqueRef{j.Kind, j.UniqueKey}]
		if !ok {
			return fmt.Errorf("job of kind %q with unique key %q was neither inserted nor found", j.Kind, j.UniqueKey)
		}
		out[i] = &twicestore.JobInsertResult{Job: row, Duplicate: true}
	}
	return nil
}

// replaceHolders gives each waiting holder of a Replace job's key that
// job's args and run time. It runs in the insert's transaction, and SQLite
// has one writer, so the holder's state is the one the INSERT saw: a
// running or finished holder is left alone (the job stays a duplicate).
func replaceHolders(ctx context.Context, q dbtx, jobs []*twicestore.JobInsertParams, out []*twicestore.JobInsertResult) error {
	for i, j := range jobs {
		r := out[i]
		if !j.Replace || !r.Duplicate || r.Job.State != twicetype.JobStateAvailable {
			continue
		}
		runAt := j.RunAt
		if runAt.IsZero() {
			runAt = time.Now()
		}
		payload := j.Args
		if payload == nil {
			payload = []byte{}
		}
		rows, err := queryJobs(ctx, q, `UPDATE twice_jobs SET args = ?, run_at = ?
			WHERE id = ? AND state = 'available' RETURNING `+jobColumns, payload, micros(runAt), r.Job.ID)
		if err != nil {
			return fmt.Errorf("replace job %d: %w", r.Job.ID, err)
		}
		if len(rows) == 1 {
			out[i] = &twicestore.JobInsertResult{Job: rows[0], Duplicate: true, Replaced: true}
		}
	}
	return nil
}

// fetchSQL leases the first due jobs in fetch order. SQLite runs one writer
// at a time, so the UPDATE's subquery and its writes see no competing fetch:
// a job can only be leased once per epoch.
//
// INDEXED BY pins the partial fetch index, which yields rows already in
// fetch order: without statistics the planner may prefer the (state, id)
// listing index, and then sort every available job to take the first few.
//
// A queue paused (with no until, or one still ahead) leases nothing: the
// pause is checked in the same statement, so a fetch never leases a job of
// a queue whose pause committed before it.
const fetchSQL = `UPDATE twice_jobs
SET state = 'running', attempt = attempt + 1, epoch = epoch + 1, lease_until = ?1, attempted_by = ?2
WHERE id IN (
	SELECT id FROM twice_jobs INDEXED BY twice_jobs_fetch
	WHERE state = 'available' AND queue = ?3 AND run_at <= ?4
	  AND kind IN (SELECT value FROM json_each(?5))
	  AND NOT EXISTS (SELECT 1 FROM twice_queue_pauses AS qp
		WHERE qp.queue = ?3 AND (qp.until IS NULL OR qp.until > ?4))
	ORDER BY priority, run_at, id
	LIMIT ?6
) AND state = 'available'
RETURNING ` + jobColumns

// JobFetch leases up to Limit due jobs of the queue and kinds in one
// statement. A Limit of zero or less, or no kinds, fetches nothing.
func (e *executor) JobFetch(ctx context.Context, p *twicestore.JobFetchParams) (*twicestore.JobFetchResult, error) {
	if p.Limit <= 0 || len(p.Kinds) == 0 {
		return &twicestore.JobFetchResult{}, nil
	}
	jobs, throttled, retryAt, err := e.fetchRows(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("fetch queue %q: %w", p.Queue, err)
	}
	slices.SortFunc(jobs, func(a, b *twicetype.JobRow) int {
		if a.Priority != b.Priority {
			return a.Priority - b.Priority
		}
		if c := a.RunAt.Compare(b.RunAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	res := &twicestore.JobFetchResult{Jobs: jobs, Processed: make([]bool, len(jobs)), Throttled: throttled, RetryAt: retryAt}
	// The peeks are a second statement, in process: the round trip the
	// fetch saves a ClaimAfter job on PostgreSQL costs nothing here.
	var (
		markers []twicestore.MarkerParams
		pos     []int
	)
	for i, j := range jobs {
		if h, ok := p.Peek[j.Kind]; ok {
			markers, pos = append(markers, twicestore.MarkerParams{Handler: h, Key: j.Key}), append(pos, i)
		}
	}
	if len(markers) > 0 {
		processed, err := e.markersProcessed(ctx, markers)
		if err != nil {
			return nil, fmt.Errorf("fetch queue %q: %w", p.Queue, err)
		}
		for k, i := range pos {
			res.Processed[i] = processed[k]
		}
	}
	return res, nil
}

// JobExtendLease moves the lease of every job still running under the
// given epoch, in one statement.
func (e *executor) JobExtendLease(ctx context.Context, p *twicestore.JobExtendLeaseParams) (*twicestore.JobExtendLeaseResult, error) {
	res := &twicestore.JobExtendLeaseResult{}
	if len(p.Leases) == 0 {
		return res, nil
	}
	leases := make([][2]int64, len(p.Leases))
	for i, l := range p.Leases {
		leases[i] = [2]int64{l.ID, l.Epoch}
	}
	// The unary + keeps the planner from driving the join from the
	// (state, id) index: each lease is a primary-key lookup.
	err := e.write(ctx, func() error {
		rows, err := e.db.QueryContext(ctx, `UPDATE twice_jobs SET lease_until = ?
			FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS epoch FROM json_each(?)) AS l
			WHERE twice_jobs.id = l.id AND twice_jobs.epoch = l.epoch AND +twice_jobs.state = 'running'
			RETURNING twice_jobs.id, twice_jobs.cancel_requested_at IS NOT NULL`, micros(p.LeaseUntil), jsonArg(leases))
		if err != nil {
			return err
		}
		defer func() { _ = rows.Close() }() // rows.Err reports what matters
		for row, err := range dbrows.Iter(rows) {
			if err != nil {
				return err
			}
			var (
				id        int64
				cancelled bool
			)
			if err := row.Scan(&id, &cancelled); err != nil {
				return err
			}
			res.Extended = append(res.Extended, id)
			if cancelled {
				res.CancelRequested = append(res.CancelRequested, id)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("extend leases: %w", err)
	}
	slices.Sort(res.Extended)
	slices.Sort(res.CancelRequested)
	return res, nil
}

// finishSQL writes one outcome, guarded by state and epoch: a worker whose
// lease was lost (rescued, perhaps fetched again under a newer epoch) writes
// nothing. An error is appended to the history, which keeps its first and
// last entries only (see keptErrors). A cancelled outcome without a note of
// its own takes the cancel request's.
//
// A park (?1 'waiting') waits on ?13 until ?2, its timer; but when the
// job's signal_seq is no longer ?12, the one its delivery was fetched
// with, a signal or a timer resolved one of its waits while the handler
// ran, and the job is made available at ?14 instead, so its handler runs
// again and reads what arrived rather than waiting for a signal that
// came already. Its finished_at is NULL, so the batch and workflow
// triggers see a move between unfinished states.
var finishSQL = `UPDATE twice_jobs SET
	state = CASE WHEN ?1 = 'waiting' AND signal_seq <> ?12 THEN 'available' ELSE ?1 END,
	run_at = CASE WHEN ?1 = 'available' THEN ?2
		WHEN ?1 = 'waiting' THEN CASE WHEN signal_seq <> ?12 THEN ?14 ELSE ?2 END
		ELSE run_at END,
	wait_name = CASE WHEN ?1 = 'waiting' THEN ?13 ELSE wait_name END,
	attempt = MAX(attempt - ?3, 0),
	snoozes = snoozes + ?9,
	lease_until = NULL,
	errors = CASE WHEN ?4 IS NULL THEN errors ELSE ` + keptErrors("json_insert(errors, '$[#]', json(?4))", "json_array_length(errors) + 1") + ` END,
	note = CASE WHEN ?1 = 'cancelled' AND ?5 = '' AND cancel_requested_at IS NOT NULL THEN ` + cancelNoteSQL + ` ELSE ?5 END,
	finished_at = ?6,
	output = CASE WHEN ?1 = 'completed' AND ?10 IS NOT NULL THEN ?10 ELSE output END,
	trace = ?11
WHERE id = ?7 AND state = 'running' AND epoch = ?8`

// keptErrors is an expression for the error history arr (of length n)
// with only its first twicestore.ErrorsKeptFirst and last
// twicestore.ErrorsKeptLast entries.
func keptErrors(arr, n string) string {
	return fmt.Sprintf(`(SELECT json_group_array(json(value)) FROM (
		SELECT value FROM json_each(%s) WHERE key < %d OR key >= (%s) - %d ORDER BY key))`,
		arr, twicestore.ErrorsKeptFirst, n, twicestore.ErrorsKeptLast)
}

// cancelNoteSQL renders a job's cancel request as twicetype.CancelRequest's
// Note does.
const cancelNoteSQL = `('cancelled' || CASE WHEN cancel_by <> '' THEN ' by ' || cancel_by ELSE '' END ||
	CASE WHEN cancel_reason <> '' THEN ': ' || cancel_reason ELSE '' END)`

// JobFinish writes a batch of outcomes in one transaction with one prepared
// UPDATE. Markers are claimed first, whatever the guard says: the effect
// they record has happened even when the lease was lost.
func (e *executor) JobFinish(ctx context.Context, p *twicestore.JobFinishParams) (*twicestore.JobFinishResult, error) {
	res := &twicestore.JobFinishResult{Applied: make([]bool, len(p.Outcomes))}
	if len(p.Outcomes) == 0 {
		return res, nil
	}
	type prepared struct {
		runAt, finishedAt any
		refund, snooze    int
		errJSON           any
		wokeAt            any // a park's run_at should a signal have come meanwhile
	}
	prep := make([]prepared, len(p.Outcomes))
	now := time.Now()
	for i, o := range p.Outcomes {
		var pr prepared
		switch o.State {
		case twicetype.JobStateAvailable:
			runAt := o.RunAt
			if runAt.IsZero() {
				runAt = now
			}
			pr.runAt = micros(runAt)
		case twicetype.JobStateWaiting:
			if err := twicestore.CheckWaitName(o.WaitName); err != nil {
				return nil, fmt.Errorf("finish job %d: %w", o.ID, err)
			}
			timer := o.RunAt
			if timer.IsZero() {
				timer = twicestore.WaitNever
			}
			pr.runAt = micros(timer)
			woke := o.FinishedAt
			if woke.IsZero() {
				woke = now
			}
			pr.wokeAt = micros(woke)
		case twicetype.JobStateCompleted, twicetype.JobStateDead, twicetype.JobStateCancelled:
			finished := o.FinishedAt
			if finished.IsZero() {
				finished = now
			}
			pr.finishedAt = micros(finished)
		default:
			return nil, fmt.Errorf("finish job %d: outcome state %q is not completed, available, waiting, dead or cancelled", o.ID, o.State)
		}
		if o.RefundAttempt {
			pr.refund = 1
		}
		if o.Snooze {
			pr.snooze = 1
		}
		if o.Error != nil {
			b, err := json.Marshal(o.Error)
			if err != nil {
				return nil, fmt.Errorf("finish job %d: encode error: %w", o.ID, err)
			}
			pr.errJSON = string(b)
		}
		prep[i] = pr
	}
	err := e.inTx(ctx, func(q dbtx) error {
		before, err := lastJobID(ctx, q)
		if err != nil {
			return err
		}
		defer func() {
			if after, err := lastJobID(ctx, q); err == nil {
				res.Inserted = after > before
			}
		}()
		update, err := q.PrepareContext(ctx, finishSQL)
		if err != nil {
			return err
		}
		defer update.Close()
		var claim *sql.Stmt
		for i, o := range p.Outcomes {
			claimedHere := false // this call stored the outcome's marker
			if o.Marker != nil {
				if claim == nil {
					if claim, err = q.PrepareContext(ctx, claimSQL); err != nil {
						return err
					}
					defer claim.Close()
				}
				m := *o.Marker
				if m.Now.IsZero() {
					m.Now = nowOr(o.FinishedAt)
				}
				if m.JobID == 0 { // the claimant is the job finishing
					m.JobID, m.Epoch = o.ID, o.Epoch
				}
				cr, err := claimMarker(ctx, func(args ...any) (sql.Result, error) {
					return claim.ExecContext(ctx, args...)
				}, &m)
				if err != nil {
					return fmt.Errorf("job %d: %w", o.ID, err)
				}
				claimedHere = !cr.AlreadyProcessed
			}
			pr := prep[i]
			r, err := update.ExecContext(ctx, string(o.State), pr.runAt, pr.refund, pr.errJSON, o.Note, pr.finishedAt, o.ID, o.Epoch, pr.snooze, outputArg(o.Output), o.Trace,
				o.SignalSeq, o.WaitName, pr.wokeAt)
			if err != nil {
				return fmt.Errorf("job %d: %w", o.ID, err)
			}
			n, err := r.RowsAffected()
			if err != nil {
				return fmt.Errorf("job %d: %w", o.ID, err)
			}
			res.Applied[i] = n == 1
			if err := insertChildren(ctx, q, o, res.Applied[i], claimedHere); err != nil {
				return fmt.Errorf("job %d: %w", o.ID, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("finish jobs: %w", err)
	}
	return res, nil
}

// rescueSQL releases expired leases: cancelled when an operator asked to
// cancel the job, else back to available while attempts remain, dead
// otherwise, recording the lost attempt either way. SET expressions read
// the row as it was, so every CASE sees the old attempt. INDEXED BY pins
// the partial index of running jobs (at most the workers' slots, sorted by
// lease_until here), for the reason fetchSQL does.
var rescueSQL = `UPDATE twice_jobs SET
	state = CASE WHEN cancel_requested_at IS NOT NULL THEN 'cancelled'
		WHEN attempt >= max_attempts THEN 'dead' ELSE 'available' END,
	finished_at = CASE WHEN cancel_requested_at IS NOT NULL OR attempt >= max_attempts THEN ?1 ELSE NULL END,
	note = CASE WHEN cancel_requested_at IS NOT NULL THEN ` + cancelNoteSQL + ` ELSE note END,
	lease_until = NULL,
	errors = ` + keptErrors(`json_insert(errors, '$[#]', json_object(
		'attempt', attempt,
		'at', ?2,
		'error', 'lease expired at ' || strftime('%Y-%m-%dT%H:%M:%fZ', lease_until / 1000000.0, 'unixepoch') ||
			' before node "' || attempted_by || '" finished the attempt'))`, "json_array_length(errors) + 1") + `
WHERE id IN (
	SELECT id FROM twice_jobs INDEXED BY twice_jobs_running_kind
	WHERE state = 'running' AND lease_until < ?1
	ORDER BY lease_until, id
	LIMIT ?3
) AND state = 'running'
RETURNING ` + jobColumns

// JobRescue releases up to Limit expired leases (all of them when Limit is
// zero or less) in one statement.
func (e *executor) JobRescue(ctx context.Context, p *twicestore.JobRescueParams) (*twicestore.JobRescueResult, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	now := nowOr(p.Now)
	var jobs []*twicetype.JobRow
	err := e.write(ctx, func() error {
		var err error
		jobs, err = queryJobs(ctx, e.db, rescueSQL, micros(now), now.UTC().Format(time.RFC3339Nano), limit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("rescue jobs: %w", err)
	}
	return driverkit.RescueResult(jobs), nil
}
