package twicepg

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/twicejobs/twice/internal/dbrows"
)

// twice_jobs is partitioned (migration 023): a job that finishes moves to
// the done partition, and a retried one moves back. A statement that waits
// for a row while another transaction moves it cannot follow the row: it
// fails with SQLSTATE 40001 serialization_failure ("tuple to be locked was
// already moved to another partition due to concurrent update"), where
// against an unpartitioned table it would have read the row's new version
// (and, say, found the job finished and left it). Repeating the statement
// reads the row where it now is, with the same outcome as without the
// move. A statement on its own (on the pool, or on *sql.DB) is repeated
// here; one inside a transaction cannot be, and its error reaches the
// caller (an executor transaction is repeated whole by inTx).

// movedTries bounds how often a statement is run when rows it waited for
// keep moving: each failure means another transaction committed a move,
// so the repeats cannot spin on their own.
const movedTries = 5

// sqlStateSerializationFailure is the SQLSTATE of a statement that met a
// row moved to another partition.
const sqlStateSerializationFailure = "40001"

// isMoved reports whether err is PostgreSQL's serialization failure.
func isMoved(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == sqlStateSerializationFailure
}

// autocommits reports whether statements on c each run in a transaction of
// their own, so that one that failed can be run again.
func autocommits(c any) bool {
	switch c.(type) {
	case *pgxpool.Pool, *sql.DB:
		return true
	}
	return false
}

// runQuery runs query, again after a serialization failure when it runs on
// its own (alone), and reports its errors as dataError does.
func runQuery(ctx context.Context, alone bool, query func() (rows, error)) (rows, error) {
	var (
		r   rows
		err error
	)
	if alone {
		r, err = firstRowRead(ctx, query)
	} else {
		r, err = query()
	}
	if err != nil {
		return nil, dataError(err)
	}
	return dataRows{r}, nil
}

// runQueryRow is runQuery for a statement of one row.
func runQueryRow(ctx context.Context, alone bool, query func() row) row {
	if !alone {
		return dataRow{query()}
	}
	return repeatedRow{ctx: ctx, query: query}
}

// firstRowRead runs query until its first row, or its end, comes without a
// serialization failure, up to movedTries times. PostgreSQL runs a
// statement that writes (UPDATE … RETURNING, a CTE that writes) to its end
// before it sends a row, so a failure always comes before the first row
// and nothing was handed to the caller when the statement is run again.
func firstRowRead(ctx context.Context, query func() (rows, error)) (rows, error) {
	for try := 1; ; try++ {
		r, err := query()
		if err != nil {
			if isMoved(err) && try < movedTries && ctx.Err() == nil {
				continue
			}
			return nil, err
		}
		peeked, err := dbrows.Peek(r)
		if isMoved(err) && try < movedTries && ctx.Err() == nil {
			r.Close()
			continue
		}
		return peeked, nil
	}
}

// repeatedRow is one row of a statement run on its own: Scan runs the
// statement, again after a serialization failure.
type repeatedRow struct {
	ctx   context.Context
	query func() row
}

func (r repeatedRow) Scan(dest ...any) error {
	for try := 1; ; try++ {
		err := r.query().Scan(dest...)
		if isMoved(err) && try < movedTries && r.ctx.Err() == nil {
			continue
		}
		return dataError(err)
	}
}

// repeatedExec runs exec, again after a serialization failure when it runs
// on its own.
func repeatedExec(ctx context.Context, alone bool, exec func() (int64, error)) (int64, error) {
	for try := 1; ; try++ {
		n, err := exec()
		if alone && isMoved(err) && try < movedTries && ctx.Err() == nil {
			continue
		}
		return n, dataError(err)
	}
}
