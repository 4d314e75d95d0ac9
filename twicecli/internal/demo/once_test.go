package demo

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func testOptions(t *testing.T) (Options, *bytes.Buffer) {
	t.Helper()
	dir := t.TempDir()
	var out bytes.Buffer
	return Options{
		DB:         filepath.Join(dir, "demo.db"),
		ObjectsDir: filepath.Join(dir, "objects"),
		Out:        &out,
		Logger:     slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, &out
}

// testWriter sends logs to the test's log, shown on failure or with -v.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func TestRunOnceConverges(t *testing.T) {
	t.Parallel()
	opts, out := testOptions(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := RunOnce(ctx, opts)
	if err != nil {
		t.Fatalf("RunOnce: %v\n%s", err, out)
	}
	r.Print(out)
	t.Log(out.String())
	if !r.Converged() {
		t.Fatalf("scenario diverged:\n%s", out)
	}
}

// TestRunOnceConvergesUnderRedelivery: with every job delivered a second
// time by the runtime, the demo's handlers still converge.
func TestRunOnceConvergesUnderRedelivery(t *testing.T) {
	t.Parallel()
	opts, out := testOptions(t)
	opts.Redeliver = true
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := RunOnce(ctx, opts)
	if err != nil {
		t.Fatalf("RunOnce: %v\n%s", err, out)
	}
	r.Print(out)
	if !r.Converged() {
		t.Fatalf("scenario diverged under redelivery:\n%s", out)
	}
}

// TestCheckerCatchesDivergence breaks convergence on purpose and expects
// the checker to say so: it must be able to fail.
func TestCheckerCatchesDivergence(t *testing.T) {
	t.Parallel()
	exec := func(query string, args ...any) func(ctx context.Context, a *App) error {
		return func(ctx context.Context, a *App) error {
			_, err := a.DB().ExecContext(ctx, query, args...)
			return err
		}
	}
	tests := []struct {
		name   string
		modify func(*Options)
		want   string
	}{{
		name:   "watermark not idempotent, run with None and redelivered",
		modify: func(o *Options) { o.nonIdempotentWatermark = true },
		want:   "watermarked objects: want exactly 1",
	}, {
		name: "duplicate email beyond the crash allowance",
		modify: func(o *Options) {
			o.beforeCheck = exec(`INSERT INTO demo_outbox (user_id, to_addr, subject, url, message_key, job_id, attempt, sent_at)
				SELECT user_id, to_addr, subject, url, message_key, job_id, attempt, sent_at FROM demo_outbox
				WHERE user_id = (SELECT id FROM demo_users WHERE name = 'alice')`)
		},
		want: "2 emails to alice: at most 1 allowed",
	}, {
		name: "lost email",
		modify: func(o *Options) {
			o.beforeCheck = exec(`DELETE FROM demo_outbox WHERE user_id = (SELECT id FROM demo_users WHERE name = 'bob')`)
		},
		want: "no email to bob: the message was lost",
	}, {
		name: "credit applied twice",
		modify: func(o *Options) {
			o.beforeCheck = exec(`INSERT INTO demo_ledger (credit_id, user_id, amount_cents, job_id, applied_at)
				SELECT credit_id, user_id, amount_cents, job_id, applied_at FROM demo_ledger ORDER BY id LIMIT 1`)
		},
		want: "ledger rows: want exactly 1",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts, out := testOptions(t)
			tt.modify(&opts)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r, err := RunOnce(ctx, opts)
			if err != nil {
				t.Fatalf("RunOnce: %v\n%s", err, out)
			}
			r.Print(out)
			if r.Converged() {
				t.Fatalf("checker reported convergence; want a divergence containing %q\n%s", tt.want, out)
			}
			if !strings.Contains(strings.Join(r.Divergences, "\n"), tt.want) {
				t.Fatalf("divergences do not mention %q:\n%s", tt.want, out)
			}
			if !strings.Contains(out.String(), "DIVERGED") {
				t.Fatalf("printed report does not say DIVERGED:\n%s", out)
			}
		})
	}
}

// convergesTwiceOn runs the scenario on the database db and expects it to
// converge; then runs it again on the same database, which checks only
// what the second run created.
func convergesTwiceOn(t *testing.T, db string) {
	t.Helper()
	opts, out := testOptions(t)
	opts.DB = db
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := RunOnce(ctx, opts)
	if err != nil {
		t.Fatalf("RunOnce: %v\n%s", err, out)
	}
	r.Print(out)
	t.Log(out.String())
	if !r.Converged() {
		t.Fatalf("scenario diverged:\n%s", out)
	}
	out.Reset()
	if r, err = RunOnce(ctx, opts); err != nil {
		t.Fatalf("second RunOnce: %v\n%s", err, out)
	}
	r.Print(out)
	if !r.Converged() {
		t.Fatalf("second scenario on the same database diverged:\n%s", out)
	}
}

// catchesCreditAppliedTwiceOn applies one credit twice on the database db
// before the check, and expects the checker to say so.
func catchesCreditAppliedTwiceOn(t *testing.T, db string) {
	t.Helper()
	opts, out := testOptions(t)
	opts.DB = db
	opts.beforeCheck = func(ctx context.Context, a *App) error {
		_, err := a.DB().ExecContext(ctx, `INSERT INTO demo_ledger (credit_id, user_id, amount_cents, job_id, applied_at)
			SELECT credit_id, user_id, amount_cents, job_id, applied_at FROM demo_ledger ORDER BY id LIMIT 1`)
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := RunOnce(ctx, opts)
	if err != nil {
		t.Fatalf("RunOnce: %v\n%s", err, out)
	}
	r.Print(out)
	if r.Converged() || !strings.Contains(strings.Join(r.Divergences, "\n"), "ledger rows: want exactly 1") {
		t.Fatalf("checker did not catch a credit applied twice:\n%s", out)
	}
}
