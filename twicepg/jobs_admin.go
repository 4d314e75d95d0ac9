package twicepg

// What operators and the dashboard do with jobs: look them up, list and
// count them, delete old finished ones, and find orphaned kinds. The bulk
// actions (retry, discard, cancel, delete) are in jobs_bulk.go.

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// JobGet returns one job, or an error wrapping twicestore.ErrNotFound.
func (e *executor) JobGet(ctx context.Context, p *twicestore.JobGetParams) (*twicetype.JobRow, error) {
	j, err := scanJob(e.q.queryRow(ctx, `SELECT `+jobColumns+` FROM twice_jobs AS j WHERE j.id = $1`, p.ID))
	if isNoRows(err) {
		return nil, fmt.Errorf("get job %d: %w", p.ID, twicestore.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get job %d: %w", p.ID, err)
	}
	return j, nil
}

// stateLiteral renders a job state as an SQL literal, for conditions that
// must prove a partial index's predicate whatever the plan. Only the known
// states, a closed set of lower-case words, are rendered as themselves;
// anything else (callers validate first, so never in practice) renders as
// NULL, which no row's state equals, rather than as text from outside.
func stateLiteral(st twicetype.JobState) string {
	if !st.Valid() {
		return "NULL"
	}
	return "'" + string(st) + "'"
}

// jsonbLiteral renders JSON text as a jsonb literal. An escape string
// (E'…') reads the same whatever standard_conforming_strings says, once
// its backslashes and quotes are doubled; the text holds no NUL (the
// filter's values are checked before they reach a store).
func jsonbLiteral(s string) string {
	return "E'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(s) + "'::jsonb"
}

// filterSQL renders f as conditions on twice_jobs AS j joined by AND
// (always at least one), numbering its parameters after the first
// numbered arguments already taken. The filter must have passed Validate.
func filterSQL(f twicestore.JobFilter, numbered int) (string, []any) {
	conds := []string{"TRUE"}
	var args []any
	add := func(cond string, arg any) {
		args = append(args, arg)
		conds = append(conds, strings.Replace(cond, "?", "$"+strconv.Itoa(numbered+len(args)), 1))
	}
	if len(f.IDs) > 0 {
		add("j.id = ANY(?::bigint[])", f.IDs)
	}
	if f.State != "" {
		// A literal, not a parameter: a generic plan must still see that
		// the state proves the predicate of twice_jobs_state_id or
		// twice_jobs_running_kind (migration 021).
		conds = append(conds, "j.state = "+stateLiteral(f.State))
	}
	if f.Kind != "" {
		add("j.kind = ?", f.Kind)
		if kindAcrossStates(f) {
			// twice_jobs_kind_id leaves running jobs to
			// twice_jobs_running_kind; said this way the planner can
			// read the two together (a BitmapOr).
			conds = append(conds, "(j.state = 'running' OR j.state <> 'running')")
		}
	}
	if f.Queue != "" {
		add("j.queue = ?", f.Queue)
	}
	if f.Node != "" {
		add("j.attempted_by = ?", f.Node)
	}
	switch f.Timing {
	case twicestore.JobDue:
		add("j.state = 'available' AND j.run_at <= ?", nowOr(f.Now))
	case twicestore.JobScheduled:
		add("j.state = 'available' AND j.run_at > ?", nowOr(f.Now))
	}
	if f.CorrelationID != "" {
		add("j.correlation_id = ?", f.CorrelationID) // twice_jobs_correlation (migration 027)
	}
	if len(f.Metadata) > 0 {
		// Containment, which twice_jobs_metadata answers (migration 027);
		// its predicate is spelt out: pairs are never contained in an
		// empty object. The pairs are a literal, not a parameter: a
		// generic plan cannot tell how few jobs hold them, and walked
		// every job by id instead of reading the index (20 ms against
		// 0.1 ms over 100,000 jobs, measured).
		conds = append(conds, "j.metadata @> "+jsonbLiteral(metadataJSON(f.Metadata))+" AND j.metadata <> '{}'::jsonb")
	}
	if searchAcrossStates(f) {
		// Both search indexes leave running jobs to
		// twice_jobs_running_kind, read whole (they are few): said this
		// way the planner can read the two together (a BitmapOr).
		conds = append(conds, "(j.state = 'running' OR j.state <> 'running')")
	}
	return strings.Join(conds, " AND "), args
}

// searchAcrossStates reports whether f looks jobs up by correlation id or
// metadata in every state, which no one index holds: twice_jobs_correlation
// and twice_jobs_metadata leave the running jobs out. A kind's filter
// says so already (kindAcrossStates).
func searchAcrossStates(f twicestore.JobFilter) bool {
	return (f.CorrelationID != "" || len(f.Metadata) > 0) && f.State == "" && f.Timing == "" && !kindAcrossStates(f)
}

// JobList lists matching jobs newest first (by id, descending). BeforeID
// continues from a previous page; a Limit of zero or less lists them all.
func (e *executor) JobList(ctx context.Context, p *twicestore.JobListParams) (*twicestore.JobListResult, error) {
	if err := p.Filter.Validate(); err != nil {
		return nil, err
	}
	query, args := jobListSQL(p)
	jobs, err := queryJobs(ctx, e.q, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return &twicestore.JobListResult{Jobs: jobs}, nil
}

// kindAcrossStates reports whether f asks for a kind's jobs in every state,
// which no one index holds since migration 021: twice_jobs_kind_id has the
// ones not running, twice_jobs_running_kind the running ones.
func kindAcrossStates(f twicestore.JobFilter) bool {
	// A correlation id is a narrower start than the kind: its index
	// holds a few jobs, whatever their state.
	return f.Kind != "" && f.State == "" && f.Timing == "" && f.CorrelationID == ""
}

// jobListSQL renders JobList's query; p must have passed Validate. A kind's
// jobs in every state are listed as two pages merged, the running ones and
// the others, each read newest first from its own index: one query over
// both would either sort every job of the kind or, in a generic plan, walk
// the primary key past the jobs of other kinds.
func jobListSQL(p *twicestore.JobListParams) (string, []any) {
	where, args := filterSQL(p.Filter, 0)
	if p.BeforeID > 0 {
		args = append(args, p.BeforeID)
		where += " AND j.id < $" + strconv.Itoa(len(args))
	}
	args = append(args, limitArg(p.Limit))
	limit := "$" + strconv.Itoa(len(args))
	page := func(where string) string {
		return `SELECT ` + jobColumns + ` FROM twice_jobs AS j WHERE ` + where + ` ORDER BY j.id DESC LIMIT ` + limit
	}
	if !kindAcrossStates(p.Filter) {
		return page(where), args
	}
	return `SELECT * FROM ((` + page(where+" AND j.state = 'running'") + `) UNION ALL (` +
		page(where+" AND j.state <> 'running'") + `)) AS j ORDER BY j.id DESC LIMIT ` + limit, args
}

// jobCountSQL renders JobCount's query; f must have passed Validate.
func jobCountSQL(f twicestore.JobFilter) (string, []any) {
	where, args := filterSQL(f, 0)
	return `SELECT j.state, j.queue, j.kind, count(*) FROM twice_jobs AS j WHERE ` + where + `
		GROUP BY j.state, j.queue, j.kind ORDER BY j.state, j.queue, j.kind`, args
}

// JobCount counts matching jobs grouped by state, queue and kind, in that
// order.
func (e *executor) JobCount(ctx context.Context, p *twicestore.JobCountParams) (*twicestore.JobCountResult, error) {
	if err := p.Filter.Validate(); err != nil {
		return nil, err
	}
	query, args := jobCountSQL(p.Filter)
	rs, err := e.q.query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	counts, err := dbrows.Collect(rs, driverkit.ScanJobCount)
	if err != nil {
		return nil, fmt.Errorf("count jobs: %w", err)
	}
	return &twicestore.JobCountResult{Counts: counts}, nil
}

// JobOrphans lists, per kind and queue, the available jobs whose kind no
// node alive since AliveSince lists among the kinds it handles.
func (e *executor) JobOrphans(ctx context.Context, p *twicestore.JobOrphansParams) (*twicestore.JobOrphansResult, error) {
	// Group first, then look for a handler once per group rather than once
	// per job.
	rs, err := e.q.query(ctx, `SELECT g.kind, g.queue, g.n, g.oldest FROM (
			SELECT kind, queue, count(*) AS n, min(created_at) AS oldest FROM twice_jobs
			WHERE state = 'available' GROUP BY kind, queue
		) AS g
		WHERE NOT EXISTS (
			SELECT 1 FROM twice_nodes AS n WHERE n.heartbeat_at >= $1 AND g.kind = ANY(n.kinds)
		)
		ORDER BY g.kind, g.queue`, p.AliveSince)
	if err != nil {
		return nil, fmt.Errorf("find orphaned kinds: %w", err)
	}
	res := &twicestore.JobOrphansResult{}
	for row, err := range dbrows.Iter(rs) {
		if err != nil {
			return nil, fmt.Errorf("find orphaned kinds: %w", err)
		}
		var o twicetype.OrphanKind
		if err := row.Scan(&o.Kind, &o.Queue, &o.Count, &o.Oldest); err != nil {
			return nil, fmt.Errorf("find orphaned kinds: %w", err)
		}
		o.Oldest = o.Oldest.UTC()
		res.Kinds = append(res.Kinds, o)
	}
	return res, nil
}

// deleteFinishedSQL deletes one batch of one finished state and returns
// how many it deleted and the highest id among them. It looks only at the
// oldest $3 rows of the state above $4 (the innermost query, a short walk
// of the (state, id) index), not at every row of it: when nothing is old
// enough yet, which is the usual case for completed jobs, an unbounded
// search read the whole history (1.5 s over 5,000,000 completed jobs,
// every pruning round of every node, measured), while this one stops
// after the window (30 ms). Ids grow with time, so the oldest rows are the
// ones due first; a row finished late with a low id can hold back deleting
// newer ones behind it for at most its own retention. $4 is the pass's
// cursor (the highest id its batches deleted): while a long transaction
// pins the xmin horizon the index keeps an entry for every row deleted
// since, and a walk from the front visits each: a round grew from 7-12 ms
// to 26-43 ms over 200,000 rows deleted under a held snapshot, while from
// the cursor it stayed at 6-9 ms (BenchmarkRetentionRoundsDue, 1 to 20
// million completed jobs).
// SKIP LOCKED lets two nodes clean up at once, each deleting other rows,
// without either waiting for the other. The window goes in as an array
// (id = ANY), so that even a generic plan, which cannot see $3, looks the
// window's rows up by key: with "id IN (subquery)" the generic plan
// PostgreSQL switches to after five runs walked the whole primary key
// instead (374 ms over 2,000,000 rows against 9 ms). The state (%[1]s) is
// a literal: twice_jobs_state_id leaves running rows out (migration 021),
// and only a literal state lets every plan, generic ones too, prove that
// the index holds the rows asked for. signals deletes the deleted jobs'
// waits' resolutions in the same statement, looked up by their primary
// key's first column whatever the plan (id = ANY, as above); a waiting
// job is never deleted (its state is no finished one).
const deleteFinishedSQL = `WITH gone AS (
	DELETE FROM twice_jobs WHERE id IN (
		SELECT id FROM twice_jobs
		WHERE id = ANY (ARRAY(SELECT id FROM twice_jobs WHERE state = %[1]s AND id > $4 ORDER BY id LIMIT $3))
			AND state = %[1]s AND finished_at < $1
		ORDER BY id
		LIMIT $2
		FOR UPDATE SKIP LOCKED)
	RETURNING id
), signals AS (
	DELETE FROM twice_signals WHERE job_id = ANY(ARRAY(SELECT id FROM gone))
)
SELECT count(*), coalesce(max(id), 0) FROM gone`

// JobDeleteFinished deletes old finished jobs, state by state, each batch
// one short DELETE, lowest ids first.
func (e *executor) JobDeleteFinished(ctx context.Context, p *twicestore.JobDeleteFinishedParams) (*twicestore.JobDeleteFinishedResult, error) {
	return driverkit.DeleteFinished(p, func(c driverkit.FinishedCut, limit int) (n int, last int64, err error) {
		err = e.q.queryRow(ctx, fmt.Sprintf(deleteFinishedSQL, stateLiteral(c.State)),
			c.Before, limit, driverkit.DeleteFinishedWindow(limit), c.After).Scan(&n, &last)
		return n, last, err
	})
}
