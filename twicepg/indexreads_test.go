package twicepg

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// TestLookupsReadOnlyTheirJobs: every way the tools look for jobs by state
// or kind reads a few pages, not the table, in a custom plan and in the
// generic plan PostgreSQL switches a prepared statement to, and so does
// every search by correlation id or metadata (migration 027). Migration 021
// left running jobs out of twice_jobs_state_id and twice_jobs_kind_id; the
// queries keep those indexes usable only by conditions the planner can
// prove against their predicates (literal states, the kind filter's two
// pages). The table holds one job of kind k.v1 in each state, older than
// 20,000 completed jobs of 200 other kinds, so a plan that walks the primary
// key or the table to find them reads hundreds of pages.
func TestLookupsReadOnlyTheirJobs(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	connString, _ := newSchema(t)
	s, err := Open(ctx, connString)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	conn := connect(t, ctx, connString)
	for _, st := range twicetype.AllJobStates {
		if _, err := conn.Exec(ctx, `INSERT INTO twice_jobs (kind, queue, args, state, max_attempts, epoch, run_at, created_at, finished_at,
				correlation_id, metadata)
			VALUES ('k.v1', 'q', '\x7b7d', $1, 3, 1, now(), now(), CASE WHEN $2 THEN now() END, 'corr-k', '{"tenant": "acme"}')`,
			string(st), st.Finished()); err != nil {
			t.Fatal(err)
		}
	}
	// Every other job has a correlation id of its own, and one in three
	// carries metadata (a trace context of its own, a tenant of 50).
	if _, err := conn.Exec(ctx, `INSERT INTO twice_jobs (kind, queue, args, state, max_attempts, epoch, run_at, created_at, finished_at,
			correlation_id, metadata)
		SELECT 'other' || g % 200 || '.v1', 'q', '\x7b7d', 'completed', 3, 1, now(), now(), now(), md5(g::text),
			CASE WHEN g % 3 = 0 THEN jsonb_build_object('traceparent', md5(g::text), 'tenant', 't' || g % 50) ELSE '{}' END
		FROM generate_series(1, 20000) AS g`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `ANALYZE twice_jobs`); err != nil {
		t.Fatal(err)
	}

	type lookup struct {
		name  string
		query string
		args  []any
	}
	var lookups []lookup
	list := func(name string, f twicestore.JobFilter) {
		q, args := jobListSQL(&twicestore.JobListParams{Filter: f, Limit: 50})
		lookups = append(lookups, lookup{"list " + name, q, args})
	}
	for _, st := range twicetype.AllJobStates {
		list("state "+string(st), twicestore.JobFilter{State: st})
		list("kind and state "+string(st), twicestore.JobFilter{Kind: "k.v1", State: st})
	}
	list("kind", twicestore.JobFilter{Kind: "k.v1"})
	// Migration 027: by correlation id and by metadata, alone, with a
	// state, with a kind.
	tenant := map[string]string{"tenant": "acme"}
	list("correlation id", twicestore.JobFilter{CorrelationID: "corr-k"})
	list("metadata", twicestore.JobFilter{Metadata: tenant})
	list("correlation id and kind", twicestore.JobFilter{CorrelationID: "corr-k", Kind: "k.v1"})
	list("metadata and kind", twicestore.JobFilter{Metadata: tenant, Kind: "k.v1"})
	list("correlation id, due", twicestore.JobFilter{CorrelationID: "corr-k", Timing: twicestore.JobDue})
	list("metadata, scheduled", twicestore.JobFilter{Metadata: tenant, Timing: twicestore.JobScheduled})
	for _, st := range twicetype.AllJobStates {
		list("correlation id and state "+string(st), twicestore.JobFilter{CorrelationID: "corr-k", State: st})
		list("metadata and state "+string(st), twicestore.JobFilter{Metadata: tenant, State: st})
	}
	for _, f := range []twicestore.JobFilter{{Kind: "k.v1"}, {State: twicetype.JobStateRunning}, {State: twicetype.JobStateDead},
		{CorrelationID: "corr-k"}, {Metadata: tenant}} {
		q, args := jobCountSQL(f)
		lookups = append(lookups, lookup{fmt.Sprintf("count %+v", f), q, args})
	}
	lookups = append(lookups, lookup{"queues", queueListSQL, []any{time.Now()}})
	for _, st := range []twicetype.JobState{twicetype.JobStateCompleted, twicetype.JobStateDead, twicetype.JobStateDiscarded, twicetype.JobStateCancelled} {
		lookups = append(lookups, lookup{"retention " + string(st), fmt.Sprintf(deleteFinishedSQL, stateLiteral(st)),
			[]any{time.Now().Add(-time.Hour), 10, 10, 0}})
	}

	for _, l := range lookups {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			if pages := pagesRead(t, conn, mode, l.query, l.args); pages > 100 {
				t.Errorf("%s (%s) read %d pages: it does not find its jobs through an index\n%s", l.name, mode, pages, l.query)
			}
		}
	}
}

// pagesRead runs query, prepared, in the plan mode given, inside a
// transaction it rolls back, and returns the shared buffers it touched.
func pagesRead(t *testing.T, conn *pgx.Conn, mode, query string, args []any) int {
	t.Helper()
	ctx := t.Context()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = `+mode); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `PREPARE lookup AS `+query); err != nil {
		t.Fatalf("prepare: %v\n%s", err, query)
	}
	defer func() { _, _ = conn.Exec(ctx, `DEALLOCATE lookup`) }()
	literals := make([]string, len(args))
	for i, a := range args {
		literals[i] = sqlLiteral(t, a)
	}
	execute := `EXECUTE lookup`
	if len(literals) > 0 {
		execute += `(` + strings.Join(literals, ", ") + `)`
	}
	var out string
	if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+execute).Scan(&out); err != nil {
		t.Fatalf("explain: %v\n%s", err, query)
	}
	var plans []struct {
		Plan struct {
			Hit  int `json:"Shared Hit Blocks"`
			Read int `json:"Shared Read Blocks"`
		} `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(out), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("read the plan: %v\n%s", err, out)
	}
	return plans[0].Plan.Hit + plans[0].Plan.Read
}

// sqlLiteral renders a query argument of the lookups above as a literal.
func sqlLiteral(t *testing.T, a any) string {
	switch v := a.(type) {
	case string:
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	case int:
		return strconv.Itoa(v)
	case time.Time:
		return "'" + v.Format(time.RFC3339Nano) + "'::timestamptz"
	default:
		t.Fatalf("no literal for %T", a)
		return ""
	}
}

// TestStateLiteral: the known states render as themselves, anything else
// as NULL, which no job's state equals.
func TestStateLiteral(t *testing.T) {
	t.Parallel()
	for _, st := range twicetype.AllJobStates {
		if got := stateLiteral(st); got != "'"+string(st)+"'" {
			t.Errorf("stateLiteral(%q) = %s", st, got)
		}
	}
	for _, st := range []twicetype.JobState{"", "Completed", "completed'; DROP TABLE twice_jobs; --"} {
		if got := stateLiteral(st); got != "NULL" {
			t.Errorf("stateLiteral(%q) = %s, want NULL", st, got)
		}
	}
}
