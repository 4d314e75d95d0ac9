package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
)

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
