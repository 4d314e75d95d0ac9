package driverkit

import (
	"context"
	"database/sql"
	"errors"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// WorkflowColumns are the columns of twice_workflows that WorkflowRow
// reads, in its order.
const WorkflowColumns = `id, name, on_dead, state, tasks, completed, dead, created_at, finished_at`

// WorkflowRow returns the reader of one row of WorkflowColumns, its times
// read as tm says.
func WorkflowRow[T, N any](tm Times[T, N]) func(dbrows.Scanner) (*twicetype.Workflow, error) {
	return func(r dbrows.Scanner) (*twicetype.Workflow, error) {
		var (
			w          twicetype.Workflow
			state      string
			createdAt  T
			finishedAt N
		)
		if err := r.Scan(&w.ID, &w.Name, &w.OnDead, &state, &w.Tasks, &w.Completed, &w.Dead, &createdAt, &finishedAt); err != nil {
			return nil, err
		}
		w.State, w.CreatedAt, w.FinishedAt = twicetype.WorkflowState(state), tm.At(createdAt), tm.Null(finishedAt)
		return &w, nil
	}
}

// BatchColumns are the columns of twice_batches that BatchRow reads, in
// its order.
const BatchColumns = `id, on_success, sealed, total, pending, completed, dead, cancelled, kind,
	COALESCE(callback_job_id, 0), created_at, finished_at`

// BatchRow returns the reader of one row of BatchColumns, its times read
// as tm says.
func BatchRow[T, N any](tm Times[T, N]) func(dbrows.Scanner) (*twicetype.Batch, error) {
	return func(r dbrows.Scanner) (*twicetype.Batch, error) {
		var (
			b          twicetype.Batch
			sealed     bool
			createdAt  T
			finishedAt N
		)
		if err := r.Scan(&b.ID, &b.OnSuccess, &sealed, &b.Total, &b.Pending, &b.Completed, &b.Dead, &b.Cancelled,
			&b.CallbackKind, &b.CallbackJobID, &createdAt, &finishedAt); err != nil {
			return nil, err
		}
		b.Open, b.CreatedAt, b.FinishedAt = !sealed, tm.At(createdAt), tm.Null(finishedAt)
		return &b, nil
	}
}

// SignalRow returns the reader of one row of a driver's signal columns:
// job_id, name, payload (a timeout's is NULL, read as nil), timed_out, at,
// sender; at is read as tm says.
func SignalRow[T, N any](tm Times[T, N]) func(dbrows.Scanner) (*twicetype.Signal, error) {
	return func(r dbrows.Scanner) (*twicetype.Signal, error) {
		var (
			s  twicetype.Signal
			at T
		)
		if err := r.Scan(&s.JobID, &s.Name, &s.Payload, &s.TimedOut, &at, &s.Sender); err != nil {
			return nil, err
		}
		s.At = tm.At(at)
		return &s, nil
	}
}

// CollectList is dbrows.Collect for a listing: with no rows it returns an
// empty list, not nil, as the results' listings are.
func CollectList[T any](rows dbrows.Rows, scan func(dbrows.Scanner) (T, error)) ([]T, error) {
	out, err := dbrows.Collect(rows, scan)
	if err == nil && out == nil {
		out = []T{}
	}
	return out, err
}

// SignalColumns is the column list SignalRow reads, for the drivers whose
// payload column reads as bytes as it is (SQLite, MySQL).
const SignalColumns = `job_id, name, payload, timed_out, at, sender`

// RowQuerier runs a query that returns one row: a *sql.DB or *sql.Tx.
type RowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// GetSignal reads the resolution of wait name of job jobID with scan (the
// driver's SignalRow), for the drivers with ? parameters; it returns
// twicestore.ErrNotFound when there is none.
func GetSignal(ctx context.Context, q RowQuerier, scan func(dbrows.Scanner) (*twicetype.Signal, error), jobID int64, name string) (*twicetype.Signal, error) {
	s, err := scan(q.QueryRowContext(ctx, `SELECT `+SignalColumns+` FROM twice_signals WHERE job_id = ? AND name = ?`, jobID, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, twicestore.ErrNotFound
	}
	return s, err
}
