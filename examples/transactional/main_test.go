package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/twicejobs/twice/internal/testkit/pgtest"
)

// TestMain fails the example's test when the example leaves a goroutine
// running after it returns: a program that copies it must shut down clean.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const want = "enqueued request req-1 twice (500 cents)\nboth jobs completed; balance: 500 cents\n"

func TestTransactionalSQLite(t *testing.T) {
	check(t, filepath.Join(t.TempDir(), "ledger.db"))
}

// TestTransactionalPostgres is skipped without TWICE_TEST_POSTGRES.
func TestTransactionalPostgres(t *testing.T) {
	if os.Getenv(pgtest.EnvURL) == "" {
		t.Skip(pgtest.EnvURL + " is not set")
	}
	url, _ := pgtest.Schema(t, "extx")
	check(t, url)
}

func check(t *testing.T, dsn string) {
	t.Helper()
	var out bytes.Buffer
	if err := run(context.Background(), dsn, &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}
