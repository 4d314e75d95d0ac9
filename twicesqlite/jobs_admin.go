package twicesqlite

// What operators and the dashboard do with jobs: look them up, list and
// count them, retry or discard dead ones, and find orphaned kinds.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

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
// with their arguments (driverkit.FilterSQL in SQLite's dialect). The
// filter must have passed Validate.
func filterSQL(f twicestore.JobFilter) (string, []any) { return driverkit.FilterSQL(f, filterDialect) }

// filterDialect is SQLite's for driverkit.FilterSQL. Ids travel as one
// JSON parameter (json_each), so no statement depends on the list's
// length. A metadata pair is looked up among the job's own: no index can
// hold every key a job may carry (an expression index is for one key
// named in advance), so a metadata filter reads the jobs the other
// conditions leave, newest first, until the page is full. json_each
// compares keys whatever characters they hold, which a JSON path could
// not.
var filterDialect = driverkit.FilterDialect{
	IDs: func(ids []int64) (string, []any) {
		return "id IN (SELECT value FROM json_each(?))", []any{jsonArg(ids)}
	},
	Time: func(t time.Time) any { return micros(t) },
	Metadata: func(key, value string) (string, []any) {
		return "EXISTS (SELECT 1 FROM json_each(metadata) AS m WHERE m.key = ? AND m.value = ?)", []any{key, value}
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
	limit := p.Limit
	if limit <= 0 {
		limit = -1
	}
	args = append(args, limit)
	jobs, err := queryJobs(ctx, e.db, `SELECT `+jobColumns+` FROM twice_jobs WHERE `+where+` ORDER BY id DESC LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return &twicestore.JobListResult{Jobs: jobs}, nil
}

// JobCount counts matching jobs grouped by state, queue and kind, in that
// order.
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

// JobOrphans lists, per kind and queue, the available jobs whose kind no
// node alive since AliveSince lists among the kinds it handles.
func (e *executor) JobOrphans(ctx context.Context, p *twicestore.JobOrphansParams) (*twicestore.JobOrphansResult, error) {
	// Group first, then look for a handler once per group rather than once
	// per job.
	rows, err := e.db.QueryContext(ctx, `SELECT g.kind, g.queue, g.n, g.oldest FROM (
			SELECT kind, queue, COUNT(*) AS n, MIN(created_at) AS oldest FROM twice_jobs
			WHERE state = 'available' GROUP BY kind, queue
		) AS g
		WHERE NOT EXISTS (
			SELECT 1 FROM twice_nodes AS n, json_each(n.kinds) AS k
			WHERE n.heartbeat_at >= ? AND k.value = g.kind
		)
		ORDER BY g.kind, g.queue`, micros(p.AliveSince))
	if err != nil {
		return nil, fmt.Errorf("find orphaned kinds: %w", err)
	}
	res := &twicestore.JobOrphansResult{}
	for row, err := range dbrows.Iter(rows) {
		if err != nil {
			return nil, fmt.Errorf("find orphaned kinds: %w", err)
		}
		var (
			o      twicetype.OrphanKind
			oldest int64
		)
		if err := row.Scan(&o.Kind, &o.Queue, &o.Count, &oldest); err != nil {
			return nil, fmt.Errorf("find orphaned kinds: %w", err)
		}
		o.Oldest = time.UnixMicro(oldest).UTC()
		res.Kinds = append(res.Kinds, o)
	}
	return res, nil
}

// JobDeleteFinished deletes old finished jobs, state by state, each batch
// one DELETE that looks only at the oldest rows of the state above the
// pass's cursor (a short walk of the (state, id) index; see
// driverkit.DeleteFinishedWindow), so the write lock is held briefly
// however many jobs have finished, even when none is old enough yet. Only
// finished states are cut, so a waiting job is never pruned; the signals
// of a deleted job go in the same DELETE (the trigger
// twice_jobs_signals_deleted of migration 019).
func (e *executor) JobDeleteFinished(ctx context.Context, p *twicestore.JobDeleteFinishedParams) (*twicestore.JobDeleteFinishedResult, error) {
	return driverkit.DeleteFinished(p, func(c driverkit.FinishedCut, limit int) (n int, last int64, err error) {
		err = e.write(ctx, func() error {
			rows, err := e.db.QueryContext(ctx, `DELETE FROM twice_jobs WHERE id IN (
				SELECT o.id FROM (
					SELECT id FROM twice_jobs INDEXED BY twice_jobs_state_id
					WHERE state = ? AND id > ? ORDER BY id LIMIT ?
				) AS o JOIN twice_jobs AS j ON j.id = o.id
				WHERE j.finished_at < ? ORDER BY o.id LIMIT ?)
			RETURNING id`,
				string(c.State), c.After, driverkit.DeleteFinishedWindow(limit), micros(c.Before), limit)
			if err != nil {
				return err
			}
			ids, err := dbrows.Collect(rows, dbrows.One[int64])
			if err != nil {
				return err
			}
			n, last = len(ids), slices.Max(append(ids, 0))
			return nil
		})
		return n, last, err
	})
}
