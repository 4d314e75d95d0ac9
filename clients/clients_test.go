// Package clients_test runs the tests of the clients in other languages
// (clients/python, clients/typescript) against a real PostgreSQL, a real twice worker and the
// real JSON API, which this Go test provides.
package clients_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twiceweb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pingArgs is the kind the clients' tests enqueue: published to the
// catalog with its one field when the worker starts.
type pingArgs struct {
	UserID int64 `json:"user_id"`
}

func (pingArgs) Kind() string { return "clients.ping.v1" }

// apiToken is the JSON API token the clients' tests use.
const apiToken = "clients-test-token-0123456789abcdef0123456789"

// rig is a schema with twice's migrations, a worker of pingArgs on it and
// the JSON API, for the duration of a test.
type rig struct {
	dsn string // a libpq URL: search_path given as options, as libpq takes it
	api string // the dashboard's base URL
}

func newRig(t *testing.T) rig {
	t.Helper()
	u, schema := pgtest.Schema(t, "clients")
	ctx := context.Background()
	store, err := twicepg.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[pingArgs](func(context.Context, *twice.Job[pingArgs]) error { return nil }), nil)
	client, err := twice.NewClient(store, twice.Config{Registry: reg, PollInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Shutdown(context.Background(), 5*time.Second) })
	dash, err := twiceweb.New(client, twiceweb.Options{APITokens: []twiceweb.APIToken{{Name: "clients-test", Token: apiToken}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(dash)
	t.Cleanup(srv.Close)
	return rig{dsn: libpqURL(t, u, schema), api: srv.URL}
}

// libpqURL turns pgtest's URL (search_path as a run-time parameter, which
// pgx takes) into one libpq takes: the search path in options.
func libpqURL(t *testing.T, raw, schema string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Del("search_path")
	q.Set("options", "-csearch_path="+schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// TestPythonClient runs clients/python/tests with the system's Python 3
// and Debian's python3-psycopg. With TWICE_TEST_POSTGRES set (CI sets it)
// a missing interpreter or driver fails the test: .ci/run installs them.
func TestPythonClient(t *testing.T) {
	r := newRig(t)
	python := "/usr/bin/python3" // Debian's, which python3-psycopg installs into
	if _, err := os.Stat(python); err != nil {
		python = "python3"
	}
	if out, err := exec.Command(python, "-c", "import psycopg").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import psycopg (%v: %s): install python3-psycopg (apt-get install -y python3-psycopg)", python, err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-m", "unittest", "discover", "-s", "tests", "-v")
	cmd.Dir = "python"
	cmd.Env = append(os.Environ(), "TWICE_CLIENT_DSN="+r.dsn, "TWICE_CLIENT_API="+r.api, "TWICE_CLIENT_TOKEN="+apiToken,
		"PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the Python client's tests failed: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestTypeScriptClient builds clients/typescript (npm ci, tsc) and runs its
// tests with Node's test runner. With TWICE_TEST_POSTGRES set (CI sets it)
// a missing node or npm fails the test.
func TestTypeScriptClient(t *testing.T) {
	r := newRig(t)
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: the TypeScript client's tests need Node 20 or later and npm", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run := func(env []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = "typescript"
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	if _, err := os.Stat("typescript/node_modules/pg"); err != nil {
		run(nil, "npm", "ci", "--no-audit", "--no-fund")
	}
	out := run([]string{"TWICE_CLIENT_DSN=" + r.dsn, "TWICE_CLIENT_API=" + r.api, "TWICE_CLIENT_TOKEN=" + apiToken}, "npm", "test")
	t.Logf("%s", out)
}
