package demo

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice/internal/testkit/mysqltest"
)

// mysqlURL returns a mysql:// URL of a database of the test's own (see
// mysqltest).
func mysqlURL(t *testing.T) string {
	u, _ := mysqltest.URL(t, "twice_demo")
	return u
}

func TestRunOnceConvergesOnMySQL(t *testing.T) {
	t.Parallel()
	opts, out := testOptions(t)
	opts.DB = mysqlURL(t)
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

// TestCheckerCatchesDivergenceOnMySQL: the checker can fail on MySQL too;
// a credit applied twice is caught.
func TestCheckerCatchesDivergenceOnMySQL(t *testing.T) {
	t.Parallel()
	opts, out := testOptions(t)
	opts.DB = mysqlURL(t)
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

// TestOpenRefusesABadMySQLURL: the URL is checked before connecting, with
// the driver's message, which never repeats the password.
func TestOpenRefusesABadMySQLURL(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]string{
		"mysql://app:s3cret@127.0.0.1:1/app":                            "parseTime=true",
		"mysql://app:s3cret@127.0.0.1:1/?parseTime=true":                "names no database",
		"mariadb://app:s3cret@127.0.0.1:1/app?loc=Local&parseTime=true": "loc=Local",
	} {
		_, err := Open(t.Context(), url, t.TempDir())
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%s) = %v, want an error saying %q without the password", url, err, want)
		}
	}
}

func TestDisplayDBHidesTheMySQLPassword(t *testing.T) {
	t.Parallel()
	got := displayDB("mysql://app:s3cret@db.internal:3306/app?parseTime=true")
	if strings.Contains(got, "s3cret") || !strings.Contains(got, "db.internal") {
		t.Errorf("displayDB = %q", got)
	}
	if dir := DefaultObjectsDir("mysql://app@db.internal:3306/app?parseTime=true"); strings.Contains(dir, "db.internal") {
		t.Errorf("DefaultObjectsDir of a URL = %q, want a directory named by its hash", dir)
	}
}
