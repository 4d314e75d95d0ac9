// Command signup runs a signup flow end to end on a fresh SQLite database,
// with public packages only: each signup commits its user row together
// with two jobs (the transactional outbox) — a verification email
// (ClaimAfter: an email may go twice after a crash, never zero times) and a
// welcome bonus credited through the job's own transaction (Transactional:
// exactly once) — and a retrying producer sends every bonus a second time.
// It then checks that each user got its email and exactly one bonus, and
// exits 1 if anything diverged.
//
//	go run ./examples/signup
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicesqlite"
)

// SendVerification emails a user the link that verifies their address.
type SendVerification struct {
	UserID int64 `json:"user_id"`
}

// Kind names the job.
func (SendVerification) Kind() string { return "email.verification.v1" }

// IdempotencyKey: one verification email per user, however often the
// message comes.
func (a SendVerification) IdempotencyKey() string { return strconv.FormatInt(a.UserID, 10) }

// CreditBonus credits a user's welcome bonus.
type CreditBonus struct {
	UserID int64 `json:"user_id"`
	Cents  int64 `json:"cents"`
}

// Kind names the job.
func (CreditBonus) Kind() string { return "balance.welcome-bonus.v1" }

// IdempotencyKey: one bonus per user.
func (a CreditBonus) IdempotencyKey() string { return strconv.FormatInt(a.UserID, 10) }

// bonusCents is every user's welcome bonus.
const bonusCents = 500

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "twice-signup-")
	if err == nil {
		defer func() { _ = os.RemoveAll(dir) }()
		err = run(ctx, filepath.Join(dir, "signup.db"), 3, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "signup:", err)
		os.Exit(1)
	}
}

// app is the application: its own tables beside twice's, in one database.
type app struct {
	db *sql.DB
}

// signup creates a user and enqueues its email and bonus in the same
// transaction: a rolled-back signup leaves no job, a committed one always
// has both.
func (a *app) signup(ctx context.Context, client *twice.Client, name string) (int64, error) {
	tx, err := a.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	res, err := tx.ExecContext(ctx, `INSERT INTO users (name, cents) VALUES (?, 0)`, name)
	if err != nil {
		return 0, err
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, err
	}
	if _, err := client.EnqueueTx(ctx, tx, SendVerification{UserID: id}, nil); err != nil {
		return 0, err
	}
	if _, err := client.EnqueueTx(ctx, tx, CreditBonus{UserID: id, Cents: bonusCents}, nil); err != nil {
		return 0, err
	}
	return id, tx.Commit()
}

// sendVerification "sends" the email: it records it in the outbox table,
// outside the job's transaction, as a mail provider would keep it.
func (a *app) sendVerification(ctx context.Context, job *twice.Job[SendVerification]) error {
	_, err := a.db.ExecContext(ctx, `INSERT INTO sent_emails (user_id) VALUES (?)`, job.Args.UserID)
	return err
}

// creditBonus writes the credit through the job's transaction, so the
// credit, the idempotency marker and the job's completion commit together.
func (a *app) creditBonus(ctx context.Context, job *twice.Job[CreditBonus]) error {
	tx := job.SQLTx()
	if tx == nil {
		return twice.Permanent(errors.New("credit bonus: no job transaction: register the kind Transactional"))
	}
	_, err := tx.ExecContext(ctx, `UPDATE users SET cents = cents + ? WHERE id = ?`, job.Args.Cents, job.Args.UserID)
	return err
}

// run signs up n users on the SQLite database at path, works their jobs,
// and checks what each strategy promises.
func run(ctx context.Context, path string, n int, out io.Writer) error {
	db, err := sql.Open("sqlite", twicesqlite.DSN(path))
	if err != nil {
		return err
	}
	defer func() { _ = db.Close() }()
	store, err := twicesqlite.New(ctx, db) // twice's tables beside the app's
	if err != nil {
		return err
	}
	a := &app{db: db}
	if _, err := db.ExecContext(ctx, `CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL, cents INTEGER NOT NULL);
		CREATE TABLE sent_emails (user_id INTEGER NOT NULL)`); err != nil {
		return err
	}

	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[SendVerification](a.sendVerification), &twice.KindOpts{Strategy: twice.ClaimAfter})
	twice.MustRegister(reg, twice.HandlerFunc[CreditBonus](a.creditBonus), &twice.KindOpts{Strategy: twice.Transactional})
	jobs := int64(3 * n) // an email, a bonus and the bonus's duplicate per user
	var completed atomic.Int64
	done := make(chan struct{})
	client, err := twice.NewClient(store, twice.Config{
		Registry: reg,
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Observer: twice.ObserverFunc(func(e twice.Event) {
			if e.Type == twice.EventCompleted && completed.Add(1) == jobs {
				close(done)
			}
		}),
	})
	if err != nil {
		return err
	}

	for i := range n {
		id, err := a.signup(ctx, client, fmt.Sprintf("user%d", i+1))
		if err != nil {
			return fmt.Errorf("signup: %w", err)
		}
		// A producer that timed out and retried sends the bonus again: a
		// second message with the same idempotency key.
		if _, err := client.Enqueue(ctx, CreditBonus{UserID: id, Cents: bonusCents}, nil); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "signed up %d users, each with its verification email and welcome bonus in one transaction\n", n)
	fmt.Fprintln(out, "a retrying producer sent every bonus a second time")

	if err := client.Start(ctx); err != nil {
		return err
	}
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("%d of %d jobs completed before %w", completed.Load(), jobs, ctx.Err())
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	if err := client.Shutdown(stopCtx, 10*time.Second); err != nil {
		return err
	}
	return check(ctx, db, n, out)
}

// check compares each user's effects with what their strategies promise:
// at least one email (ClaimAfter), exactly one bonus (Transactional).
func check(ctx context.Context, db *sql.DB, n int, out io.Writer) error {
	rows, err := db.QueryContext(ctx, `SELECT u.id, u.cents, (SELECT count(*) FROM sent_emails e WHERE e.user_id = u.id) FROM users u ORDER BY u.id`)
	if err != nil {
		return err
	}
	defer func() { _ = rows.Close() }()
	var emails, diverged int
	for rows.Next() {
		var id, cents, sent int64
		if err := rows.Scan(&id, &cents, &sent); err != nil {
			return err
		}
		emails += int(sent)
		if sent < 1 || cents != bonusCents {
			diverged++
			fmt.Fprintf(out, "user %d diverged: %d emails (want at least 1), %d cents (want exactly %d)\n", id, sent, cents, bonusCents)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	fmt.Fprintf(out, "verification emails sent: %d for %d users (at least one each)\n", emails, n)
	fmt.Fprintf(out, "welcome bonuses: %d cents each, credited once though delivered twice\n", bonusCents)
	if diverged > 0 {
		return fmt.Errorf("%d users diverged", diverged)
	}
	fmt.Fprintln(out, "converged: every effect is what its strategy promises")
	return nil
}
