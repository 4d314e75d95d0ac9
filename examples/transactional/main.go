// Command transactional shows a Transactional kind: the handler writes its
// effect through the job's own transaction, so the effect, the idempotency
// marker and the job's completion commit together: exactly once, however
// often the message is delivered. It runs on SQLite or PostgreSQL, and the
// handler shows the one driver-neutral way in: job.Tx() returns the
// driver's own transaction, a *sql.Tx on SQLite and a pgx.Tx on PostgreSQL.
//
//	go run ./examples/transactional -db /tmp/ledger.db
//	go run ./examples/transactional -db 'postgres://app@localhost:5432/app?sslmode=disable'
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
)

// CreditAccount moves money: it must happen exactly once per request.
type CreditAccount struct {
	AccountID int64  `json:"account_id"`
	Cents     int64  `json:"cents"`
	RequestID string `json:"request_id"`
}

// Kind names the job.
func (CreditAccount) Kind() string { return "ledger.credit.v1" }

// IdempotencyKey makes two messages for the same request one effect: the
// marker is claimed under the request id.
func (a CreditAccount) IdempotencyKey() string { return a.RequestID }

// credit writes the effect in the job's transaction. Its type is the
// driver's: the handler uses it as it would any transaction of its own.
func credit(ctx context.Context, job *twice.Job[CreditAccount]) error {
	switch tx := job.Tx().(type) {
	case *sql.Tx: // twicesqlite
		_, err := tx.ExecContext(ctx, `UPDATE accounts SET cents = cents + ? WHERE id = ?`, job.Args.Cents, job.Args.AccountID)
		return err
	case pgx.Tx: // twicepg
		_, err := tx.Exec(ctx, `UPDATE accounts SET cents = cents + $1 WHERE id = $2`, job.Args.Cents, job.Args.AccountID)
		return err
	default:
		return twice.Permanent(fmt.Errorf("credit: the job's transaction is a %T; register the kind Transactional", tx))
	}
}

func main() {
	db := flag.String("db", "ledger.db", "SQLite file, or a postgres:// URL")
	flag.Parse()
	if err := run(context.Background(), *db, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "transactional:", err)
		os.Exit(1)
	}
}

// ledger is the application's database, on either driver.
type ledger struct {
	store twicestore.Store
	// exec runs a statement of the application's own, with SQLite's
	// placeholders or PostgreSQL's.
	exec    func(ctx context.Context, sqlite, postgres string, args ...any) error
	balance func(ctx context.Context, id int64) (int64, error)
	close   func()
}

func open(ctx context.Context, dsn string) (*ledger, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		pool, err := pgxpool.New(ctx, dsn)
		if err != nil {
			return nil, err
		}
		store, err := twicepg.New(ctx, pool)
		if err != nil {
			pool.Close()
			return nil, err
		}
		return &ledger{
			store: store,
			exec: func(ctx context.Context, _, q string, args ...any) error {
				_, err := pool.Exec(ctx, q, args...)
				return err
			},
			balance: func(ctx context.Context, id int64) (c int64, err error) {
				err = pool.QueryRow(ctx, `SELECT cents FROM accounts WHERE id = $1`, id).Scan(&c)
				return c, err
			},
			close: pool.Close,
		}, nil
	}
	db, err := sql.Open("sqlite", twicesqlite.DSN(dsn))
	if err != nil {
		return nil, err
	}
	store, err := twicesqlite.New(ctx, db)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return &ledger{
		store: store,
		exec: func(ctx context.Context, q, _ string, args ...any) error {
			_, err := db.ExecContext(ctx, q, args...)
			return err
		},
		balance: func(ctx context.Context, id int64) (c int64, err error) {
			err = db.QueryRowContext(ctx, `SELECT cents FROM accounts WHERE id = ?`, id).Scan(&c)
			return c, err
		},
		close: func() { _ = db.Close() },
	}, nil
}

func run(ctx context.Context, dsn string, out io.Writer) error {
	l, err := open(ctx, dsn)
	if err != nil {
		return err
	}
	defer l.close()
	if err := l.exec(ctx,
		`CREATE TABLE IF NOT EXISTS accounts (id INTEGER PRIMARY KEY, cents INTEGER NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS accounts (id bigint PRIMARY KEY, cents bigint NOT NULL)`); err != nil {
		return err
	}
	if err := l.exec(ctx, `INSERT INTO accounts (id, cents) VALUES (?, 0)`, `INSERT INTO accounts (id, cents) VALUES ($1, 0)`, 1); err != nil {
		return err
	}

	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[CreditAccount](credit), &twice.KindOpts{Strategy: twice.Transactional})
	var completed atomic.Int64
	done := make(chan struct{})
	client, err := twice.NewClient(l.store, twice.Config{
		Registry: reg,
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		// Told once a job's outcome is recorded.
		Observer: twice.ObserverFunc(func(e twice.Event) {
			if e.Type == twice.EventCompleted && completed.Add(1) == 2 {
				close(done)
			}
		}),
	})
	if err != nil {
		return err
	}

	// The same request sent twice, as a retrying producer would: two
	// messages, one idempotency key.
	req := CreditAccount{AccountID: 1, Cents: 500, RequestID: "req-1"}
	for range 2 {
		if _, err := client.Enqueue(ctx, req, nil); err != nil {
			return err
		}
	}
	_, _ = fmt.Fprintf(out, "enqueued request %s twice (%d cents)\n", req.RequestID, req.Cents)
	if err := client.Start(ctx); err != nil {
		return err
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		return errors.New("the jobs did not complete within 30s")
	}
	stopCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := client.Shutdown(stopCtx, 10*time.Second); err != nil {
		return err
	}
	cents, err := l.balance(ctx, 1)
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(out, "both jobs completed; balance: %d cents\n", cents)
	return nil
}
