package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the example's test when the example leaves a goroutine
// running after it returns: a program that copies it must shut down clean.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRecurring(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), filepath.Join(t.TempDir(), "recurring.db"), &out); err != nil {
		t.Fatal(err)
	}
	want := "pinged db\n" +
		"nightly-report \"0 3 * * *\" report.nightly.v1: ticked false\n" +
		"ping-db \"@every 1s\" health.ping.v1: ticked true\n" +
		"triggered nightly-report: report.nightly.v1 job, duplicate false\n" +
		"triggered nightly-report: report.nightly.v1 job, duplicate true\n"
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}
