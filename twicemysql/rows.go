package twicemysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
	"github.com/twicejobs/twice/twicetype"
)

// jobColumns is the column list every job query returns, in scanJob's order.
const jobColumns = `id, kind, queue, priority, args, message_id, idempotency_key, correlation_id,
	unique_key, state, attempt, max_attempts, epoch, run_at, lease_until, attempted_by,
	errors, note, created_at, finished_at, metadata, cancel_requested_at, cancel_by, cancel_reason, snoozes, trace,
	wait_name, signal_seq`

// rowScanner is one row of a result: dbrows.Scanner, so the driver's scan
// functions serve dbrows.Collect as they are.
type rowScanner = dbrows.Scanner

func scanJob(r rowScanner) (*twicetype.JobRow, error) {
	var (
		j                      twicetype.JobRow
		state, errs, meta      string
		leaseUntil, finishedAt sql.NullTime
		cancelAt               sql.NullTime
		cancelBy, cancelReason string
	)
	err := r.Scan(&j.ID, &j.Kind, &j.Queue, &j.Priority, &j.Args, &j.MessageID, &j.Key, &j.CorrelationID,
		&j.UniqueKey, &state, &j.Attempt, &j.MaxAttempts, &j.Epoch, &j.RunAt, &leaseUntil, &j.AttemptedBy,
		&errs, &j.Note, &j.CreatedAt, &finishedAt, &meta, &cancelAt, &cancelBy, &cancelReason, &j.Snoozes, &j.Trace,
		&j.WaitName, &j.SignalSeq)
	if err != nil {
		return nil, err
	}
	if j.Args == nil {
		j.Args = []byte{}
	}
	if cancelAt.Valid {
		j.Cancel = &twicetype.CancelRequest{At: driverkit.FromNullTime(cancelAt), By: cancelBy, Reason: cancelReason}
	}
	j.State = twicetype.JobState(state)
	j.RunAt = j.RunAt.UTC()
	j.CreatedAt = j.CreatedAt.UTC()
	j.LeaseUntil = driverkit.FromNullTime(leaseUntil)
	j.FinishedAt = driverkit.FromNullTime(finishedAt)
	if err := driverkit.DecodeJobJSON(&j, errs, meta); err != nil {
		return nil, err
	}
	return &j, nil
}

// queryJobs runs a query returning jobColumns and scans every row.
func queryJobs(ctx context.Context, q dbtx, query string, args ...any) ([]*twicetype.JobRow, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return dbrows.Collect(rows, scanJob)
}

// metadataJSON encodes job metadata for its column; none is "{}".
func metadataJSON(m map[string]string) string {
	if len(m) == 0 {
		return "{}"
	}
	b, _ := json.Marshal(m) // a map of strings always encodes
	return string(b)
}

// in returns "(?, ?, ?)" for n values, for a statement's IN list, and the
// values as arguments. With interpolateParams (Open's default) the list
// costs no round trip; n is never 0 (callers return early on an empty list).
func in[T any](values []T) (string, []any) {
	args := make([]any, len(values))
	for i, v := range values {
		args[i] = v
	}
	return "(" + strings.TrimSuffix(strings.Repeat("?, ", len(values)), ", ") + ")", args
}
