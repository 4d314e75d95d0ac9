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

func TestHTTPAPI(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), filepath.Join(t.TempDir(), "api.db"), &out); err != nil {
		t.Fatal(err)
	}
	want := "request 1: 202 {\"job_id\":1} (replayed: false)\n" +
		"request 2: 202 {\"job_id\":1} (replayed: true)\n" +
		"shipment jobs enqueued: 1\n"
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}
