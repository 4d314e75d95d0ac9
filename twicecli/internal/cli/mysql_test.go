package cli

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/twicejobs/twice/internal/testkit/mysqltest"
)

// newMySQLSetup is a setup whose --db is a mysql:// URL of a database of
// its own on the TWICE_TEST_MYSQL server.
func newMySQLSetup(t *testing.T) *setup {
	t.Helper()
	u, _ := mysqltest.URL(t, "twice_cli")
	s := &setup{t: t, db: u}
	s.ok("migrate")
	return s
}

func TestMySQLURLWorksForTheAdminCommands(t *testing.T) {
	t.Parallel()
	s := newMySQLSetup(t)
	testAdminCommands(t, s, "MySQL")
	// The mariadb:// scheme names the same database.
	s.db = "mariadb" + strings.TrimPrefix(s.db, "mysql")
	if r := s.ok("jobs", "--json"); !strings.Contains(r.stdout, "ads.image-watermark.v1") {
		t.Errorf("jobs on the mariadb:// URL: %q", r.stdout)
	}
}

// TestMySQLURLWorksForServeAndDemo: the commands that run the demo's kinds
// work on MySQL too, its application tables included.
func TestMySQLURLWorksForServeAndDemo(t *testing.T) {
	t.Parallel()
	s := newMySQLSetup(t)
	testServeAndDemo(t, s, "MySQL", "(in mysql)")
}

// TestMySQLURLBench: twice bench runs on a mysql:// URL, each mode to its
// summary.
func TestMySQLURLBench(t *testing.T) {
	t.Parallel()
	s := newMySQLSetup(t)
	for _, args := range [][]string{
		{"bench", "burndown", "--jobs", "200", "--strategy", "transactional"},
		{"bench", "steady", "--duration", "1s", "--strategy", "claim-after"},
		{"bench", "latency", "--duration", "1s", "--rate", "50"},
	} {
		r := s.ok(args...)
		var summary map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &summary); err != nil || summary["mode"] != args[1] {
			t.Errorf("twice %s: summary %q (%v)", strings.Join(args, " "), r.stdout, err)
		}
	}
}

// TestMySQLDSNRefusedIsBadInput: a MySQL URL twicemysql refuses for its
// text is bad input (exit 2) with the driver's message saying what to
// change, before any connection is tried, and never with the password;
// every command that opens --db, the demo included, refuses it so.
func TestMySQLDSNRefusedIsBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ db, want string }{
		{"mysql://app:s3cret@127.0.0.1:1/app", "parseTime=true"},
		{"mysql://app:s3cret@127.0.0.1:1/?parseTime=true", "names no database"},
		{"mariadb://app:s3cret@127.0.0.1:1?parseTime=true", "names no database"},
		{"mysql://app:s3cret@127.0.0.1:1/app?parseTime=true&loc=Local", "loc=Local"},
		{"mysql://app:s3cret@127.0.0.1:1/app?parseTime=true&transaction_isolation=%27READ-UNCOMMITTED%27", "READ-UNCOMMITTED"},
		{"mysql://app:s3cret@127.0.0.1:1/app?parseTime=true&sql_mode=%27%27", "STRICT_TRANS_TABLES"},
		{"mysql://app:s3cret@127.0.0.1:1/app?parseTime=maybe", "maybe"},
		{"mysql://app:s3cret@127.0.0.1:port/app?parseTime=true", "port"},
		{"app:s3cret@tcp(127.0.0.1:1)/app?parseTime=true", "mysql://"},
	} {
		for _, args := range [][]string{{"jobs"}, {"migrate"}, {"bench", "burndown"}, {"demo", "--once"}, {"serve"}, {"dashboard"}} {
			r := runCLI(t, t.Context(), append(args, "--db", tc.db)...)
			wantError(t, r, ExitUsage, tc.want, "--help")
			if strings.Contains(r.stdout+r.stderr, "s3cret") {
				t.Errorf("twice %s --db %s printed the password: %s", strings.Join(args, " "), tc.db, r.stderr)
			}
			if strings.Contains(r.stderr, "goroutine ") {
				t.Errorf("twice %s --db %s: a stack trace: %s", strings.Join(args, " "), tc.db, r.stderr)
			}
		}
	}
}

// TestMySQLUnreachableIsAFailure: a well-formed URL of a server that does
// not answer is the database's failure, exit 1, without the password.
func TestMySQLUnreachableIsAFailure(t *testing.T) {
	t.Parallel()
	r := runCLI(t, t.Context(), "jobs", "--db", "mysql://app:s3cret@127.0.0.1:1/app?parseTime=true&timeout=2s")
	wantError(t, r, ExitFailure, "127.0.0.1:1")
	if strings.Contains(r.stderr, "s3cret") {
		t.Errorf("the error printed the password: %s", r.stderr)
	}
}

// TestMySQLDemoHidesThePassword: the demo prints its database, but never a
// password in the URL.
func TestMySQLDemoHidesThePassword(t *testing.T) {
	t.Parallel()
	s := newMySQLSetup(t)
	u, err := url.Parse(s.db)
	if err != nil {
		t.Fatal(err)
	}
	// A wrong password: the server refuses it, and the refusal must not
	// repeat it.
	u.User = url.UserPassword(u.User.Username(), "hunter2-secret")
	s.db = u.String()
	r := s.run("demo", "--once", "--objects", t.TempDir())
	if strings.Contains(r.stdout+r.stderr, "hunter2-secret") {
		t.Errorf("demo --once printed the password:\n%s\n%s", r.stdout, r.stderr)
	}
	if r := s.run("jobs"); strings.Contains(r.stdout+r.stderr, "hunter2-secret") {
		t.Errorf("jobs printed the password:\n%s\n%s", r.stdout, r.stderr)
	}
}

func TestDisplayDBHidesTheMySQLPassword(t *testing.T) {
	t.Parallel()
	for db, want := range map[string]string{
		"mysql://app:s3cret@db.internal:3306/app?parseTime=true":   "mysql://app:xxxxx@db.internal:3306/app?parseTime=true",
		"mariadb://app:s3cret@db.internal:3306/app?parseTime=true": "mariadb://app:xxxxx@db.internal:3306/app?parseTime=true",
		"app:s3:cret@tcp(db.internal:3306)/app?parseTime=true":     "app:xxxxx@tcp(db.internal:3306)/app?parseTime=true",
		"app@tcp(db.internal:3306)/app?parseTime=true":             "app@tcp(db.internal:3306)/app?parseTime=true",
		"mysql://app@db.internal/app":                              "mysql://app@db.internal/app",
	} {
		if got := displayDB(db); got != want {
			t.Errorf("displayDB(%q) = %q, want %q", db, got, want)
		}
	}
}
