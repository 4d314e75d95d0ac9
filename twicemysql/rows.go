package twicemysql

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/internal/driverkit"
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

// scanJob reads one row of jobColumns. An empty args column comes back
// from MySQL as nil; it is the empty payload, as on the other drivers.
func scanJob(r rowScanner) (*twicetype.JobRow, error) {
	j, err := driverkit.ScanJob(driverkit.NativeTimes, r)
	if err == nil && j.Args == nil {
		j.Args = []byte{}
	}
	return j, err
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
