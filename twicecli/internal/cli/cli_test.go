package cli

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/twicejobs/twice/twicecli/internal/demo"

	_ "github.com/twicejobs/twice/twicesqlite" // registers the "sqlite" driver for snapshots
)

func TestMain(m *testing.M) {
	if name := os.Getenv(testWorkerEnv); name != "" {
		os.Exit(runTestWorker(name)) // this process plays a team's worker binary
	}
	goleak.VerifyTestMain(m)
}

// result is what one in-process run of the CLI produced.
type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs in process, with args, the CLI of a team whose registry
// holds the demo's kinds (with handlers that dead-letter what they are
// given: never serve it), as twicecli.Main(reg) builds it.
func runCLI(t *testing.T, ctx context.Context, args ...string) result {
	t.Helper()
	reg, err := demo.NewRegistry(nil)
	if err != nil {
		t.Fatal(err)
	}
	return runWith(t, ctx, Options{Registry: reg, Demo: DemoCommand}, args...)
}

// runStock runs the stock binary's CLI in process: no registry, and demo.
func runStock(t *testing.T, ctx context.Context, args ...string) result {
	t.Helper()
	return runWith(t, ctx, Options{Demo: DemoCommand}, args...)
}

func runWith(t *testing.T, ctx context.Context, opts Options, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(ctx, opts, args, &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// setup is a test's database: a migrated SQLite file in a temporary
// directory.
type setup struct {
	t  *testing.T
	db string
}

func newSetup(t *testing.T) *setup {
	t.Helper()
	s := &setup{t: t, db: filepath.Join(t.TempDir(), "twice.db")}
	s.ok("migrate")
	return s
}

// run runs the CLI on the setup's database.
func (s *setup) run(args ...string) result {
	s.t.Helper()
	return runCLI(s.t, s.t.Context(), append(args, "--db", s.db)...)
}

// ok runs the CLI and fails the test unless it exits 0.
func (s *setup) ok(args ...string) result {
	s.t.Helper()
	r := s.run(args...)
	if r.code != ExitOK {
		s.t.Fatalf("twice %s: exit %d, want 0\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// wantError checks that r failed with code and printed exactly one line,
// "twice: ...", containing each of wants.
func wantError(t *testing.T, r result, code int, wants ...string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit code %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
	if !strings.HasPrefix(r.stderr, "twice: ") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("stderr is not one line \"twice: <message>\": %q", r.stderr)
	}
	for _, w := range wants {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr %q does not mention %q", r.stderr, w)
		}
	}
}

// jobsSnapshot lists every stored job straight from the table, read-only,
// so a test can check that a failed command changed nothing.
func jobsSnapshot(t *testing.T, path string) []string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	rows, err := db.QueryContext(t.Context(), `SELECT id, kind, queue, state, attempt, epoch, args, errors, note FROM twice_jobs ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	var jobs []string
	for rows.Next() {
		var (
			id, attempt, epoch                   int64
			kind, queue, state, args, errs, note string
		)
		if err := rows.Scan(&id, &kind, &queue, &state, &attempt, &epoch, &args, &errs, &note); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, fmt.Sprintf("%d %s %s %s %d %d %s %s %q", id, kind, queue, state, attempt, epoch, args, errs, note))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return jobs
}

// sameJobs fails the test when the stored jobs differ from before.
func sameJobs(t *testing.T, path string, before []string) {
	t.Helper()
	after := jobsSnapshot(t, path)
	if strings.Join(before, "\n") != strings.Join(after, "\n") {
		t.Errorf("stored jobs changed:\nbefore:\n%s\nafter:\n%s", strings.Join(before, "\n"), strings.Join(after, "\n"))
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// openRW opens the database for a test to write to it directly.
func openRW(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	return db
}
