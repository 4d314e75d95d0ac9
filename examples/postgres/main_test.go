package main

import (
	"bytes"
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/twicejobs/twice/internal/testkit/pgtest"
)

// TestMain fails the example's test when the example leaves a goroutine
// running after it returns: a program that copies it must shut down clean.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestPostgres runs the example in a schema of its own; it is skipped
// without TWICE_TEST_POSTGRES.
func TestPostgres(t *testing.T) {
	url, _ := pgtest.Schema(t, "expg")
	var out bytes.Buffer
	if err := run(context.Background(), url, &out); err != nil {
		t.Fatal(err)
	}
	want := "jobs stored: 1\nwelcomed user 1\n"
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}
