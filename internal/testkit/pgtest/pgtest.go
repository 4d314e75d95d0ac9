// Package pgtest gives a test a PostgreSQL schema of its own on the server
// that TWICE_TEST_POSTGRES names, so tests on one server run in parallel
// without seeing each other's jobs. It is imported by tests, and by
// twicetest for Case.PostgresURL.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// EnvURL is the environment variable naming the test server, for example
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable.
const EnvURL = "TWICE_TEST_POSTGRES"

// Schema creates a schema named prefix plus a random suffix, drops it when
// the test ends, and returns the server's URL with search_path set to it.
// It skips the test when EnvURL is unset, and fails it when the variable is
// set but the server cannot be reached: CI sets it, and must never pass by
// skipping.
func Schema(t testing.TB, prefix string) (connURL, schema string) {
	t.Helper()
	base := os.Getenv(EnvURL)
	if base == "" {
		t.Skip(EnvURL + " is not set; .ci/run sets it to the local server")
	}
	return SchemaIn(t, base, prefix)
}

// SchemaIn is Schema on the server base names, whatever the environment
// says; it fails the test when the schema cannot be created.
func SchemaIn(t testing.TB, base, prefix string) (connURL, schema string) {
	t.Helper()
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	schema = prefix + "_" + hex.EncodeToString(suffix)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, base)
	if err != nil {
		t.Fatalf("PostgreSQL at %s: %v", redact(base), err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatalf("PostgreSQL at %s is unreachable or refuses to create a schema: %v", redact(base), err)
	}
	t.Cleanup(func() {
		p, err := pgxpool.New(context.Background(), base)
		if err != nil {
			return
		}
		defer p.Close()
		_, _ = p.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`)
	})
	return WithParams(t, base, map[string]string{"search_path": schema}), schema
}

// redact returns a URL fit for a failure message: without its password.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the given URL"
	}
	return u.Redacted()
}

// WithParams returns raw with the query parameters set.
func WithParams(t testing.TB, raw string, params map[string]string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("PostgreSQL URL %q: %v", raw, err)
	}
	q := u.Query()
	for k, v := range params {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// CompletionWitness is the SQL that records every move of a job into
// completed, as the database saw it and when, in a table completions
// (job_id, at) of the current schema: the independent witness that no job
// completed twice. It reads the update's transition tables once per
// statement: a job that completes moves to twice_jobs' done partition,
// which a row-level UPDATE trigger does not see (migration 023).
var CompletionWitness = []string{
	`CREATE TABLE completions (job_id bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`,
	`CREATE FUNCTION record_completion() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO completions (job_id)
		SELECT n.id FROM witness_new AS n JOIN witness_old AS o ON o.id = n.id
		WHERE n.state = 'completed' AND o.state <> 'completed';
		RETURN NULL;
	END $$`,
	`CREATE TRIGGER record_completion AFTER UPDATE ON twice_jobs
		REFERENCING OLD TABLE AS witness_old NEW TABLE AS witness_new
		FOR EACH STATEMENT EXECUTE FUNCTION record_completion()`,
}
