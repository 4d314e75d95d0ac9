package demo

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/twicejobs/twice/twicemysql"
)

// IsMySQLURL reports whether db names a MySQL or MariaDB database (a
// mysql:// or mariadb:// URL) rather than a SQLite file.
func IsMySQLURL(db string) bool {
	return strings.HasPrefix(db, "mysql://") || strings.HasPrefix(db, "mariadb://")
}

// isURL reports whether db names a database server rather than a file.
func isURL(db string) bool { return IsPostgresURL(db) || IsMySQLURL(db) }

// mysqlSchema is the demo's tables on MySQL and MariaDB, one statement
// each (the driver runs one statement an Exec unless the DSN sets
// multiStatements). The columns with a default are VARCHAR: MySQL gives a
// TEXT column no literal default.
var mysqlSchema = []string{
	`CREATE TABLE IF NOT EXISTS demo_users (
    id                BIGINT      NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name              TEXT        NOT NULL,
    email             TEXT        NOT NULL,
    confirmed         INT         NOT NULL DEFAULT 0,
    verify_token_hash VARCHAR(64) NOT NULL DEFAULT '',
    created_at        BIGINT      NOT NULL
)`,
	`CREATE TABLE IF NOT EXISTS demo_outbox (
    id          BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    user_id     BIGINT NOT NULL,
    to_addr     TEXT   NOT NULL,
    subject     TEXT   NOT NULL,
    url         TEXT   NOT NULL,
    message_key TEXT   NOT NULL,
    job_id      BIGINT NOT NULL,
    attempt     INT    NOT NULL,
    sent_at     BIGINT NOT NULL
)`,
	`CREATE TABLE IF NOT EXISTS demo_images (
    id         BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name       TEXT         NOT NULL,
    source     LONGBLOB     NOT NULL,
    object_key VARCHAR(255) NOT NULL DEFAULT '',
    created_at BIGINT       NOT NULL
)`,
	`CREATE TABLE IF NOT EXISTS demo_credits (
    id           BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    user_id      BIGINT NOT NULL,
    amount_cents BIGINT NOT NULL,
    reason       TEXT   NOT NULL,
    created_at   BIGINT NOT NULL
)`,
	`CREATE TABLE IF NOT EXISTS demo_ledger (
    id           BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    credit_id    BIGINT NOT NULL,
    user_id      BIGINT NOT NULL,
    amount_cents BIGINT NOT NULL,
    job_id       BIGINT NOT NULL,
    applied_at   BIGINT NOT NULL
)`,
	`CREATE TABLE IF NOT EXISTS demo_balances (
    user_id BIGINT NOT NULL PRIMARY KEY,
    cents   BIGINT NOT NULL
)`,
}

// openMySQL opens the App's database and store on a MySQL URL: one
// database/sql pool through go-sql-driver/mysql, which the store wraps
// (twicemysql.New, which checks the server and migrates), so the
// application's transactions are ones EnqueueTx accepts. The URL is
// checked as twicemysql.Open checks it (parseTime=true, a database, ...).
// Errors never repeat the URL, which may hold a password.
func openMySQL(ctx context.Context, dsn string) (*App, error) {
	cfg, err := twicemysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("open demo database %s: %w", displayDB(dsn), err)
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("open demo database %s: %w", displayDB(dsn), err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(twicemysql.MaxOpenConnsDefault)
	db.SetMaxIdleConns(16)
	// A server closes idle connections after its wait_timeout.
	db.SetConnMaxIdleTime(5 * time.Minute)
	store, err := twicemysql.New(ctx, db)
	if err != nil {
		_ = db.Close() // New's error is the one to report
		return nil, fmt.Errorf("open demo database %s: %w", displayDB(dsn), err)
	}
	return &App{db: db, store: store, dialect: mysqlDialect}, nil
}

// dialect is the SQL the App's database speaks.
type dialect int

const (
	sqliteDialect dialect = iota
	postgresDialect
	mysqlDialect
)

// numbered matches the $1, $2, … placeholders the demo's queries are
// written with.
var numbered = regexp.MustCompile(`\$[0-9]+`)

// q returns query in the App's dialect: the demo's SQL is written with $1,
// $2, … placeholders, which SQLite and PostgreSQL take, each used once and
// in order; MySQL takes ? instead.
func (a *App) q(query string) string {
	if a.dialect != mysqlDialect {
		return query
	}
	return numbered.ReplaceAllString(query, "?")
}

// insertID runs query, an INSERT … RETURNING id, in tx and returns the new
// row's id. MySQL has no RETURNING: it runs the INSERT alone and reads the
// id AUTO_INCREMENT gave the row.
func (a *App) insertID(ctx context.Context, tx *sql.Tx, query string, args ...any) (int64, error) {
	var id int64
	if a.dialect != mysqlDialect {
		err := tx.QueryRowContext(ctx, query, args...).Scan(&id)
		return id, err
	}
	insert, ok := strings.CutSuffix(strings.TrimSpace(query), "RETURNING id")
	if !ok {
		return 0, fmt.Errorf("demo query %q does not end in RETURNING id", query)
	}
	res, err := tx.ExecContext(ctx, a.q(insert), args...)
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}
