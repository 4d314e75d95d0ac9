package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicesqlite"
)

// TestMain fails the example's test when the example leaves a goroutine
// running after it returns: a program that copies it must shut down clean.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestWorker runs the worker, enqueues a job from another client on the
// same database (as the application would), waits for the worker to work
// it, then shuts the worker down as SIGTERM would.
func TestWorker(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, path, pw, slog.New(slog.NewTextHandler(io.Discard, nil)))
		_ = pw.Close()
	}()

	store, err := twicesqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	producer, err := twice.NewClient(store, twice.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := producer.Enqueue(context.Background(), WelcomeEmail{UserID: 7}, &twice.EnqueueOpts{Queue: "email"}); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(pr)
	if !lines.Scan() || lines.Text() != "sent welcome email to user 7" {
		t.Fatalf("first line %q, want the welcome email", lines.Text())
	}
	cancel() // SIGTERM
	if !lines.Scan() || lines.Text() != "stopped" {
		t.Fatalf("line %q, want stopped", lines.Text())
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not stop")
	}
}
