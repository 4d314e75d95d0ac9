// Command postgres runs twice on PostgreSQL with the application's own
// pgxpool: a signup writes its user row and enqueues its welcome job in one
// pgx transaction (EnqueueTx), so the job exists exactly when the row does;
// a signup that rolls back leaves no job. A worker on the same pool then
// works the job.
//
//	go run ./examples/postgres -db 'postgres://app@localhost:5432/app?sslmode=disable'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicepg"
)

// WelcomeEmail is the job a signup enqueues.
type WelcomeEmail struct {
	UserID int64 `json:"user_id"`
}

// Kind names the job.
func (WelcomeEmail) Kind() string { return "email.welcome.v1" }

func main() {
	db := flag.String("db", "", "PostgreSQL URL (twice's tables go in its search_path's first schema)")
	flag.Parse()
	if *db == "" {
		fmt.Fprintln(os.Stderr, "postgres: give the database with -db postgres://...")
		os.Exit(2)
	}
	if err := run(context.Background(), *db, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "postgres:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string, out io.Writer) error {
	// The application's pool; twice shares it, so jobs commit with the
	// application's writes. New applies twice's migrations and leaves the
	// pool to its owner.
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := twicepg.New(ctx, pool)
	if err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS users (id bigint PRIMARY KEY, name text NOT NULL)`); err != nil {
		return err
	}

	welcomed := make(chan int64, 1)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[WelcomeEmail](func(_ context.Context, job *twice.Job[WelcomeEmail]) error {
		select {
		case welcomed <- job.Args.UserID:
		default:
		}
		return nil
	}), nil)
	client, err := twice.NewClient(store, twice.Config{
		Registry: reg,
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}

	// A signup that commits: the row and the job together.
	if err := signup(ctx, pool, client, 1, "Ada", true); err != nil {
		return err
	}
	// A signup that fails after enqueueing: the rollback takes the job too.
	if err := signup(ctx, pool, client, 2, "Bob", false); !errors.Is(err, errRolledBack) {
		return fmt.Errorf("the failed signup: %w", err)
	}
	list, err := client.JobList(ctx, &twice.JobListParams{JobFilter: twice.JobFilter{Kind: WelcomeEmail{}.Kind()}})
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(out, "jobs stored: %d\n", len(list.Jobs))

	if err := client.Start(ctx); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		_ = client.Shutdown(stopCtx, 10*time.Second) // what still runs after 10 s is put back, attempt not spent
	}()
	select {
	case id := <-welcomed:
		_, _ = fmt.Fprintf(out, "welcomed user %d\n", id)
	case <-time.After(30 * time.Second):
		return errors.New("the welcome job did not run within 30s")
	}
	return nil
}

// signup inserts a user and enqueues its welcome job in one transaction,
// and commits it or rolls it back.
func signup(ctx context.Context, pool *pgxpool.Pool, client *twice.Client, id int64, name string, commit bool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO users (id, name) VALUES ($1, $2)`, id, name); err != nil {
			return err
		}
		if _, err := client.EnqueueTx(ctx, tx, WelcomeEmail{UserID: id}, nil); err != nil {
			return err
		}
		if !commit {
			return errRolledBack
		}
		return nil
	})
}

var errRolledBack = errors.New("signup rolled back")
