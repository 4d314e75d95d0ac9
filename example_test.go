package twice_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicesqlite"
)

// WelcomeEmail is a job's args: IDs only, with a versioned kind.
type WelcomeEmail struct{ UserID int64 }

func (WelcomeEmail) Kind() string { return "email.welcome.v1" }

// The quick start of the README: a kind, a handler with a strategy, an
// enqueue in the application's own transaction, and a worker.
func Example() {
	dir, _ := os.MkdirTemp("", "twice-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	// The application's database; twice keeps its jobs in it.
	db, _ := sql.Open("sqlite", twicesqlite.DSN(filepath.Join(dir, "app.db")))
	defer db.Close()
	store, err := twicesqlite.New(ctx, db)
	if err != nil {
		panic(err)
	}
	_, _ = db.ExecContext(ctx, `CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)`)

	sent := make(chan struct{})
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[WelcomeEmail](func(ctx context.Context, job *twice.Job[WelcomeEmail]) error {
		var name string
		err := db.QueryRowContext(ctx, `SELECT name FROM users WHERE id = ?`, job.Args.UserID).Scan(&name)
		if err == sql.ErrNoRows {
			return twice.NoOp("user deleted") // already nothing to do: a success
		}
		if err != nil {
			return err // retried with backoff
		}
		fmt.Printf("welcome, %s\n", name) // the effect; the runtime claims it after
		close(sent)
		return nil
	}), &twice.KindOpts{Strategy: twice.ClaimAfter})

	client, err := twice.NewClient(store, twice.Config{Registry: reg})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}

	// The signup and its job commit together, or neither does.
	tx, _ := db.BeginTx(ctx, nil)
	_, _ = tx.ExecContext(ctx, `INSERT INTO users (id, name) VALUES (42, 'Ada')`)
	if _, err := client.EnqueueTx(ctx, tx, WelcomeEmail{UserID: 42}, nil); err != nil {
		panic(err)
	}
	_ = tx.Commit()

	<-sent
	_ = client.Shutdown(ctx, 10*time.Second)
	// Output: welcome, Ada
}
