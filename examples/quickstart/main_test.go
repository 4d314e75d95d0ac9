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

func TestQuickstart(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), filepath.Join(t.TempDir(), "quickstart.db"), &out); err != nil {
		t.Fatal(err)
	}
	want := "enqueued email.welcome.v1\nwelcome email sent to user 42\njob is completed after 1 attempt(s)\n"
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}
