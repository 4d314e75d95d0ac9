package twicemysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicemysql"
	"github.com/twicejobs/twice/twicestore"
)

// WelcomeEmail is a job's args: IDs only, with a versioned kind.
type WelcomeEmail struct{ UserID int64 }

func (WelcomeEmail) Kind() string { return "email.welcome.v1" }

// An application keeps its jobs in its own MySQL database and enqueues in
// its own transactions: a signup's row and its welcome email commit
// together, or neither does. The worker finds the committed job by polling
// (MySQL has no LISTEN/NOTIFY), within Config.PollInterval.
func ExampleNew() {
	ctx := context.Background()
	// The application's DSN, user:pass@tcp(host:3306)/app?parseTime=true;
	// here a scratch database on the test server, dropped at the end.
	dsn, drop := exampleDatabase()
	defer drop()

	db, err := sql.Open("mysql", dsn)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	store, err := twicemysql.New(ctx, db) // checks the server, applies twice's migrations
	if err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE users (id BIGINT PRIMARY KEY, name VARCHAR(100) NOT NULL)`); err != nil {
		panic(err)
	}

	sent := make(chan struct{})
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[WelcomeEmail](func(ctx context.Context, job *twice.Job[WelcomeEmail]) error {
		var name string
		if err := db.QueryRowContext(ctx, `SELECT name FROM users WHERE id = ?`, job.Args.UserID).Scan(&name); err != nil {
			return err
		}
		fmt.Printf("welcome, %s\n", name)
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

	signUp := func(id int64, name string, commit bool) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			panic(err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO users (id, name) VALUES (?, ?)`, id, name); err != nil {
			panic(err)
		}
		if _, err := client.EnqueueTx(ctx, tx, WelcomeEmail{UserID: id}, nil); err != nil {
			panic(err)
		}
		if !commit {
			_ = tx.Rollback() // the user and the job are gone together
			return
		}
		if err := tx.Commit(); err != nil {
			panic(err)
		}
	}
	signUp(41, "Bob", false)
	signUp(42, "Ada", true)

	<-sent
	_ = client.Shutdown(ctx, 10*time.Second)
	res, err := store.JobList(ctx, &twicestore.JobListParams{})
	if err != nil {
		panic(err)
	}
	fmt.Println("jobs stored:", len(res.Jobs))
	// Output:
	// welcome, Ada
	// jobs stored: 1
}
