// Command signup runs the seed's signup flow end to end on a fresh SQLite
// database: signups commit their jobs with their rows, faults are injected
// through the real twice runtime, and the outcome is checked against what
// each kind's strategy promises. It exits 1 if anything diverged.
//
//	go run ./examples/signup
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/twicejobs/twice/internal/demo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "signup:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "twice-signup-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	report, err := demo.RunOnce(ctx, demo.Options{DB: filepath.Join(dir, "signup.db"), Out: os.Stdout, Logger: logger})
	if err != nil {
		return err
	}
	report.Print(os.Stdout)
	if !report.Converged() {
		return fmt.Errorf("%d effects diverged", len(report.Divergences))
	}
	return nil
}
