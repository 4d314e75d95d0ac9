package twicemysql

// What operators and the dashboard do with jobs besides looking them up,
// listing and counting them (jobs.go): delete old finished ones and find
// orphaned kinds. The bulk actions (retry, discard, cancel, delete) are in
// jobs_bulk.go.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// metadataPath is the JSON path of the member named key of a job's
// metadata: the key quoted as encoding/json quotes it, the way
// metadataJSON stored it. MySQL decodes the quoted key and the document's
// keys alike; MariaDB compares the key as it is escaped in the document,
// which is encoding/json's escaping too, so the one path finds the member
// on both whatever quotes, backslashes or other characters the key holds.
func metadataPath(key string) string {
	b, _ := json.Marshal(key) // a string always encodes
	return "$." + string(b)
}

// limitSQL is a LIMIT clause of n rows, or nothing for zero or less (every
// row): MySQL has no LIMIT -1. n is an int, rendered as digits.
func limitSQL(n int) string {
	if n <= 0 {
		return ""
	}
	return " LIMIT " + strconv.Itoa(n)
}

// JobOrphans lists, per kind and queue, the available jobs whose kind no
// node alive since AliveSince lists among the kinds it handles. A node's
// kinds are a JSON array, read as rows by JSON_TABLE into a VARBINARY
// column, so kinds compare by their bytes as everywhere else.
func (e *executor) JobOrphans(ctx context.Context, p *twicestore.JobOrphansParams) (*twicestore.JobOrphansResult, error) {
	// Group first, then look for a handler once per group rather than once
	// per job.
	rows, err := e.db.QueryContext(ctx, `SELECT g.kind, g.queue, g.n, g.oldest FROM (
			SELECT kind, queue, COUNT(*) AS n, MIN(created_at) AS oldest FROM twice_jobs
			WHERE state = 'available' GROUP BY kind, queue
		) AS g
		WHERE NOT EXISTS (
			SELECT 1 FROM twice_nodes AS n,
				JSON_TABLE(n.kinds, '$[*]' COLUMNS (kind VARBINARY(1024) PATH '$')) AS k
			WHERE n.heartbeat_at >= ? AND k.kind = g.kind
		)
		ORDER BY g.kind, g.queue`, dbTime(p.AliveSince))
	if err != nil {
		return nil, fmt.Errorf("find orphaned kinds: %w", err)
	}
	kinds, err := dbrows.Collect(rows, func(row dbrows.Scanner) (twicetype.OrphanKind, error) {
		var o twicetype.OrphanKind
		err := row.Scan(&o.Kind, &o.Queue, &o.Count, &o.Oldest)
		o.Oldest = o.Oldest.UTC()
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("find orphaned kinds: %w", err)
	}
	return &twicestore.JobOrphansResult{Kinds: kinds}, nil
}

// JobDeleteFinished deletes old finished jobs, state by state, each batch
// one short transaction, lowest ids first. A batch looks only at the
// oldest rows of the state above the pass's cursor (a short walk of the
// (state, id) index; see driverkit.DeleteFinishedWindow), so a round that
// finds nothing old enough yet stays cheap however long the history is.
// MySQL cannot DELETE from a table its own subquery reads, nor take a
// LIMIT in an IN subquery, so the batch's rows are first read and locked
// (FOR UPDATE SKIP LOCKED: two nodes cleaning up at once each take other
// rows, neither waits), then deleted by id under the same guard. The
// deleted jobs' waits' resolutions (twice_signals) go in the same
// statement (the trigger twice_jobs_composition_deleted of migration
// 002); a waiting job is never deleted (its state is no finished one).
func (e *executor) JobDeleteFinished(ctx context.Context, p *twicestore.JobDeleteFinishedParams) (*twicestore.JobDeleteFinishedResult, error) {
	return driverkit.DeleteFinished(p, func(c driverkit.FinishedCut, limit int) (n int, last int64, err error) {
		err = e.inTx(ctx, func(q dbtx) error {
			rows, err := q.QueryContext(ctx, `SELECT j.id FROM (
					SELECT id FROM twice_jobs FORCE INDEX (twice_jobs_state_id)
					WHERE state = ? AND id > ? ORDER BY id LIMIT ?
				) AS o JOIN twice_jobs AS j ON j.id = o.id
				WHERE j.state = ? AND j.finished_at < ? ORDER BY j.id LIMIT ?
				FOR UPDATE SKIP LOCKED`,
				string(c.State), c.After, driverkit.DeleteFinishedWindow(limit), string(c.State), dbTime(c.Before), limit)
			if err != nil {
				return err
			}
			ids, err := dbrows.Collect(rows, dbrows.One[int64])
			if err != nil || len(ids) == 0 {
				n, last = 0, 0
				return err
			}
			list, args := in(ids)
			res, err := q.ExecContext(ctx, `DELETE FROM twice_jobs WHERE id IN `+list+` AND state = ?`,
				append(args, string(c.State))...)
			if err != nil {
				return err
			}
			deleted, err := res.RowsAffected()
			if err != nil {
				return err
			}
			n, last = int(deleted), slices.Max(ids)
			return nil
		})
		return n, last, err
	})
}
