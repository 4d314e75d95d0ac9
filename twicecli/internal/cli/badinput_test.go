package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

const emailKind = "email.partner-verification.v1"

// withJob returns a setup holding one job, and the snapshot of its jobs.
func withJob(t *testing.T) (*setup, []string) {
	t.Helper()
	s := newSetup(t)
	s.ok("enqueue", emailKind, `{"user_id": 1}`)
	before := jobsSnapshot(t, s.db)
	if len(before) != 1 {
		t.Fatalf("setup stored %d jobs, want 1", len(before))
	}
	return s, before
}

func TestEnqueueUnknownKind(t *testing.T) {
	t.Parallel()
	s, before := withJob(t)
	r := s.run("enqueue", "email.partner-verfication.v1", `{"user_id": 1}`)
	wantError(t, r, ExitUsage, `"email.partner-verfication.v1"`, "unknown job kind", emailKind)
	sameJobs(t, s.db, before)
}

func TestEnqueueMalformedJSON(t *testing.T) {
	t.Parallel()
	s, before := withJob(t)
	for _, tc := range []struct{ args, want string }{
		{`{"user_id": 1`, "not valid JSON"},
		{`{user_id: 1}`, "not valid JSON"},
		{``, "not valid JSON"},
		{`[1, 2]`, "a JSON array, not an object"},
		{`"user"`, "a JSON string, not an object"},
		{`null`, "a JSON null, not an object"},
		{`{"user_id": 1} {"user_id": 2}`, "not valid JSON"},
	} {
		r := s.run("enqueue", emailKind, tc.args)
		wantError(t, r, ExitUsage, tc.want)
	}
	sameJobs(t, s.db, before)
}

func TestEnqueueArgsPolicy(t *testing.T) {
	t.Parallel()
	s, before := withJob(t)
	for _, tc := range []struct{ kind, args, want string }{
		{emailKind, `{"user_id": 1, "email": "a@example.com"}`, `unknown field "email"`},
		{emailKind, `{"user_id": "42"}`, "cannot unmarshal string"},
		{emailKind, `{"user_id": 1.5}`, "cannot unmarshal number 1.5"},
		{"balance.credit.v1", `{"credit_id": 1, "user_id": 1, "amount_cents": [5]}`, "cannot unmarshal array"},
		{"email.partner-verification", `{"user_id": 1}`, "not versioned: end it with .v1"},
		{"Email.Welcome.v1", `{}`, "upper-case"},
		{emailKind, `{"user_id": 1, "pad": "` + strings.Repeat("x", 3000) + `"}`, "over the 2048-byte limit"},
	} {
		r := s.run("enqueue", tc.kind, tc.args)
		wantError(t, r, ExitUsage, tc.want)
	}
	sameJobs(t, s.db, before)
}

// TestDBCannotBeOpened points --db into a directory that does not exist:
// every command fails with exit 1 and creates nothing.
func TestDBCannotBeOpened(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "missing", "twice.db")
	for _, args := range [][]string{
		{"migrate"},
		{"jobs"},
		{"jobs", "show", "1"},
		{"enqueue", emailKind, `{"user_id": 1}`},
		{"dlq", "ls"},
		{"dlq", "retry", "--all"},
		{"orphans"},
		{"serve"},
		{"demo", "--once"},
	} {
		r := runCLI(t, t.Context(), append(args, "--db", path)...)
		wantError(t, r, ExitFailure, path)
		if strings.Contains(r.stderr, "see 'twice") {
			t.Errorf("%v: a database that cannot be opened is not a usage error: %q", args, r.stderr)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("the failed commands created %d entries in %s", len(entries), dir)
	}
}

// TestDBNotADatabase points --db at a text file: every command fails with
// exit 1 and the file is left exactly as it was.
func TestDBNotADatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "notes.txt")
	const text = "these are my notes, not a database\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"migrate"},
		{"jobs"},
		{"enqueue", emailKind, `{"user_id": 1}`},
		{"dlq", "discard", "--all"},
		{"orphans"},
		{"serve"},
		{"demo", "--once"},
	} {
		r := runCLI(t, t.Context(), append(args, "--db", path)...)
		wantError(t, r, ExitFailure, path, "not a SQLite database")
	}
	if got := readFile(t, path); got != text {
		t.Errorf("the text file changed: %q", got)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("the failed commands left %d entries in %s, want only the text file", len(entries), dir)
	}
}

// TestDBSchemaTooNew runs every command on a database migrated by a newer
// twice: each fails with exit 1, says to upgrade, and changes no job.
func TestDBSchemaTooNew(t *testing.T) {
	t.Parallel()
	s, _ := withJob(t)
	// The way twicesqlite's own test makes a database from the future.
	db := openRW(t, s.db)
	if _, err := db.ExecContext(t.Context(), `INSERT INTO twice_migrations (version, name, applied_at)
		SELECT MAX(version) + 5, 'from_the_future', 0 FROM twice_migrations`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	before := jobsSnapshot(t, s.db)
	for _, args := range [][]string{
		{"migrate"},
		{"jobs"},
		{"jobs", "show", "1"},
		{"enqueue", emailKind, `{"user_id": 2}`},
		{"dlq", "retry", "1"},
		{"dlq", "discard", "--all"},
		{"orphans"},
		{"serve"},
		{"demo", "--once"},
	} {
		r := s.run(args...)
		wantError(t, r, ExitFailure, "newer", "upgrade twice")
	}
	sameJobs(t, s.db, before)
}

// TestUsageErrors checks that asking wrongly exits 2 with one line.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	s, before := withJob(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "missing command"},
		{[]string{"job"}, `did you mean "jobs"`},
		{[]string{"jobs", "--colour"}, "unknown flag: --colour"},
		{[]string{"jobs", "--limit", "many"}, `invalid argument "many" for "--limit"`},
		{[]string{"jobs", "--limit", "0"}, "--limit 0"},
		{[]string{"jobs", "--state", "finished"}, `--state "finished"`},
		{[]string{"jobs", "show"}, "takes 1 arguments"},
		{[]string{"jobs", "show", "1", "2"}, "takes 1 arguments"},
		{[]string{"jobs", "show", "one"}, `"one" is not a job id`},
		{[]string{"jobs", "list"}, `unknown command "list"`},
		{[]string{"enqueue", emailKind}, "takes 2 arguments"},
		{[]string{"enqueue", emailKind, `{"user_id": 1}`, "--delay", "-1s"}, "--delay -1s is negative"},
		{[]string{"enqueue", emailKind, `{"user_id": 1}`, "--delay", "soon"}, `invalid argument "soon"`},
		{[]string{"enqueue", emailKind, `{"user_id": 1}`, "--max-attempts", "-1"}, "--max-attempts -1"},
		{[]string{"dlq"}, "missing subcommand"},
		{[]string{"dlq", "retry"}, "give the IDs"},
		{[]string{"dlq", "retry", "1", "--all"}, "not both"},
		{[]string{"dlq", "discard", "x"}, `"x" is not a job id`},
		{[]string{"serve", "--grace", "-1s"}, "--grace -1s is negative"},
		{[]string{"serve", "--log-level", "loud"}, `--log-level "loud"`},
		{[]string{"demo", "now"}, `unknown command "now"`},
	} {
		r := s.run(tc.args...)
		wantError(t, r, ExitUsage, tc.want, "--help")
	}
	sameJobs(t, s.db, before)
}

// TestHelp exits 0 and prints the commands.
func TestHelp(t *testing.T) {
	t.Parallel()
	r := runCLI(t, t.Context(), "--help")
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, cmd := range []string{"demo", "serve", "dashboard", "migrate", "enqueue", "jobs", "dlq", "queues", "orphans", "recurring", "toggles", "--db"} {
		if !strings.Contains(r.stdout, cmd) {
			t.Errorf("help does not mention %s:\n%s", cmd, r.stdout)
		}
	}
}

// TestDBFromEnvironment: without --db, TWICE_DB names the database.
func TestDBFromEnvironment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "from-env.db")
	t.Setenv("TWICE_DB", path)
	r := runCLI(t, t.Context(), "migrate")
	if r.code != ExitOK || !strings.HasPrefix(r.stdout, path+": schema version") {
		t.Fatalf("migrate with TWICE_DB: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, t.Context(), "enqueue", emailKind, `{"user_id": 1}`); r.code != ExitOK {
		t.Fatalf("enqueue with TWICE_DB: exit %d, %q", r.code, r.stderr)
	}
	if n := len(jobsSnapshot(t, path)); n != 1 {
		t.Errorf("%d jobs in the TWICE_DB database, want 1", n)
	}
	// The flag wins over the environment.
	other := filepath.Join(t.TempDir(), "flag.db")
	if r := runCLI(t, t.Context(), "migrate", "--db", other); r.code != ExitOK || !strings.HasPrefix(r.stdout, other) {
		t.Errorf("--db with TWICE_DB set: exit %d, %q", r.code, r.stdout)
	}
}

func TestDashboardRefusesNonLoopbackWithoutAuth(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	for _, args := range [][]string{
		{"serve", "--dashboard", "0.0.0.0:0"},
		{"serve", "--dashboard", ":0"},
		{"serve", "--dashboard", "127.0.0.1:0", "--dashboard-basic-auth", "nopassword"},
	} {
		r := s.run(args...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, "--dashboard") {
			t.Errorf("%v: exit %d, want %d with a --dashboard error:\n%s", args, r.code, ExitUsage, r.stderr)
		}
	}
	// The stock dashboard's flag is --basic-auth: its error names it.
	r := s.run("dashboard", "--addr", "127.0.0.1:0", "--basic-auth", "nopassword")
	if r.code != ExitUsage || !strings.Contains(r.stderr, "--basic-auth: give USER:PASSWORD") || strings.Contains(r.stderr, "--dashboard-basic-auth") {
		t.Errorf("dashboard --basic-auth nopassword: exit %d, want %d naming --basic-auth:\n%s", r.code, ExitUsage, r.stderr)
	}
}

// TestBadBytes (issue 12 item 2): a flag value or argument that is not
// UTF-8 or holds a NUL byte is a usage error (exit 2) for every command,
// checked before the database is asked, so it never answers with a raw
// error; nothing changes.
func TestBadBytes(t *testing.T) {
	t.Parallel()
	s, before := withJob(t)
	for _, args := range [][]string{
		{"jobs", "--kind", "\xff"},
		{"jobs", "--queue", "a\x00b"},
		{"jobs", "show", "\xff"},
		{"dlq", "ls", "--kind", "email\x00"},
		{"dlq", "retry", "--all", "--kind", "\xfe"},
		{"enqueue", emailKind, "{\"user_id\": 1, \"x\": \"\xff\"}"},
		{"enqueue", "email\x00.v1", `{"user_id": 1}`},
		{"enqueue", emailKind, `{"user_id": 1}`, "--unique-key", "k\xff"},
		{"toggles", "set", emailKind, "off", "--reason", "bad \xff bytes"},
		{"toggles", "ls", "--file", "x\x00"},
		{"markers", "get", "h\xff", "k"},
		{"orphans", "--log-level", "\xff"},
	} {
		r := s.run(args...)
		wantError(t, r, ExitUsage, "--help")
		if !strings.Contains(r.stderr, "not UTF-8") && !strings.Contains(r.stderr, "NUL byte") {
			t.Errorf("twice %q: %s does not say what is wrong with the bytes", args, r.stderr)
		}
		if !utf8.ValidString(r.stderr) {
			t.Errorf("twice %q: the error echoes the bad bytes: %q", args, r.stderr)
		}
	}
	// The database URL, from the flag or the environment, too.
	r := runCLI(t, t.Context(), "jobs", "--db", "postgres://x/\xff")
	wantError(t, r, ExitUsage, "--db", "not UTF-8")
	sameJobs(t, s.db, before)
}
