package demo

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice/internal/testkit/pgtest"
)

// postgresURL returns a URL of a schema of the test's own (see pgtest).
func postgresURL(t *testing.T) string {
	u, _ := pgtest.Schema(t, "twice_demo")
	return u
}

func TestRunOnceConvergesOnPostgres(t *testing.T) {
	t.Parallel()
	opts, out := testOptions(t)
	opts.DB = postgresURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := RunOnce(ctx, opts)
	if err != nil {
		t.Fatalf("RunOnce: %v\n%s", err, out)
	}
	r.Print(out)
	t.Log(out.String())
	if !r.Converged() {
		t.Fatalf("scenario diverged:\n%s", out)
	}

	// A second run on the same database checks only what it created.
	out.Reset()
	if r, err = RunOnce(ctx, opts); err != nil {
		t.Fatalf("second RunOnce: %v\n%s", err, out)
	}
	r.Print(out)
	if !r.Converged() {
		t.Fatalf("second scenario on the same database diverged:\n%s", out)
	}
}

// TestCheckerCatchesDivergenceOnPostgres: the checker can fail on
// PostgreSQL too; a credit applied twice is caught.
func TestCheckerCatchesDivergenceOnPostgres(t *testing.T) {
	t.Parallel()
	opts, out := testOptions(t)
	opts.DB = postgresURL(t)
	opts.beforeCheck = func(ctx context.Context, a *App) error {
		_, err := a.DB().ExecContext(ctx, `INSERT INTO demo_ledger (credit_id, user_id, amount_cents, job_id, applied_at)
			SELECT credit_id, user_id, amount_cents, job_id, applied_at FROM demo_ledger ORDER BY id LIMIT 1`)
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := RunOnce(ctx, opts)
	if err != nil {
		t.Fatalf("RunOnce: %v\n%s", err, out)
	}
	r.Print(out)
	if r.Converged() || !strings.Contains(strings.Join(r.Divergences, "\n"), "ledger rows: want exactly 1") {
		t.Fatalf("checker did not catch a credit applied twice:\n%s", out)
	}
}

func TestDisplayDBHidesThePassword(t *testing.T) {
	t.Parallel()
	got := displayDB("postgres://app:s3cret@db.internal:5432/app?sslmode=require")
	if strings.Contains(got, "s3cret") || !strings.Contains(got, "db.internal") {
		t.Errorf("displayDB = %q", got)
	}
	if got := displayDB("/tmp/x.db"); got != "/tmp/x.db" {
		t.Errorf("displayDB of a file = %q", got)
	}
}
