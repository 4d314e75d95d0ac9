package demo

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicetype"
)

// sqliteSchema, postgresSchema and mysqlSchema are the demo application's
// own tables, the same in every dialect but for ids and bytes. They carry no foreign
// keys and no unique constraint on the effects (ledger rows, sent emails),
// on purpose: a duplicate effect must be stored, so the checker can see it.
// Times are microseconds since the epoch; confirmed is 0 or 1.
const sqliteSchema = `
CREATE TABLE IF NOT EXISTS demo_users (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    name              TEXT    NOT NULL,
    email             TEXT    NOT NULL,
    confirmed         INTEGER NOT NULL DEFAULT 0,
    verify_token_hash TEXT    NOT NULL DEFAULT '', -- sha256 of the live single-use token
    created_at        INTEGER NOT NULL
);
-- The email sink: what would have been sent, one row per send.
CREATE TABLE IF NOT EXISTS demo_outbox (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id     INTEGER NOT NULL,
    to_addr     TEXT    NOT NULL,
    subject     TEXT    NOT NULL,
    url         TEXT    NOT NULL,
    message_key TEXT    NOT NULL,
    job_id      INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    sent_at     INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS demo_images (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       TEXT    NOT NULL,
    source     BLOB    NOT NULL,
    object_key TEXT    NOT NULL DEFAULT '', -- set by the watermark job
    created_at INTEGER NOT NULL
);
-- Credits granted by the application; the job applies each one.
CREATE TABLE IF NOT EXISTS demo_credits (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id      INTEGER NOT NULL,
    amount_cents INTEGER NOT NULL,
    reason       TEXT    NOT NULL,
    created_at   INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS demo_ledger (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    credit_id    INTEGER NOT NULL,
    user_id      INTEGER NOT NULL,
    amount_cents INTEGER NOT NULL,
    job_id       INTEGER NOT NULL,
    applied_at   INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS demo_balances (
    user_id INTEGER PRIMARY KEY,
    cents   INTEGER NOT NULL
);
`

const postgresSchema = `
CREATE TABLE IF NOT EXISTS demo_users (
    id                bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name              text    NOT NULL,
    email             text    NOT NULL,
    confirmed         integer NOT NULL DEFAULT 0,
    verify_token_hash text    NOT NULL DEFAULT '', -- sha256 of the live single-use token
    created_at        bigint  NOT NULL
);
-- The email sink: what would have been sent, one row per send.
CREATE TABLE IF NOT EXISTS demo_outbox (
    id          bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id     bigint  NOT NULL,
    to_addr     text    NOT NULL,
    subject     text    NOT NULL,
    url         text    NOT NULL,
    message_key text    NOT NULL,
    job_id      bigint  NOT NULL,
    attempt     integer NOT NULL,
    sent_at     bigint  NOT NULL
);
CREATE TABLE IF NOT EXISTS demo_images (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text   NOT NULL,
    source     bytea  NOT NULL,
    object_key text   NOT NULL DEFAULT '', -- set by the watermark job
    created_at bigint NOT NULL
);
-- Credits granted by the application; the job applies each one.
CREATE TABLE IF NOT EXISTS demo_credits (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id      bigint NOT NULL,
    amount_cents bigint NOT NULL,
    reason       text   NOT NULL,
    created_at   bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS demo_ledger (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    credit_id    bigint NOT NULL,
    user_id      bigint NOT NULL,
    amount_cents bigint NOT NULL,
    job_id       bigint NOT NULL,
    applied_at   bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS demo_balances (
    user_id bigint PRIMARY KEY,
    cents   bigint NOT NULL
);
`

// createSchema creates the demo's tables that do not exist yet. The
// statements of SQLite and PostgreSQL run as one batch (pgx sends a
// statement without arguments over the simple protocol, which takes
// several); MySQL's run one by one.
func createSchema(ctx context.Context, db *sql.DB, d dialect) error {
	schema := []string{sqliteSchema}
	switch d {
	case postgresDialect:
		schema = []string{postgresSchema}
	case mysqlDialect:
		schema = mysqlSchema
	}
	for _, stmt := range schema {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("create demo tables: %w", err)
		}
	}
	return nil
}

// Signup is what one signup stored: the user and the jobs committed with
// it.
type Signup struct {
	UserID   int64
	Email    *twicetype.JobRow // the verification email job
	CreditID int64             // the signup bonus
	Credit   *twicetype.JobRow // the job applying it
}

// Signup creates a user with a signup bonus and, in the same transaction,
// enqueues the verification email and the credit: the user exists if and
// only if its jobs do (the transactional outbox). bonusCents of zero grants
// no bonus.
func (a *App) Signup(ctx context.Context, c *twice.Client, name string, bonusCents int64) (*Signup, error) {
	var s Signup
	err := a.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		s.UserID, err = a.insertID(ctx, tx, `INSERT INTO demo_users (name, email, created_at) VALUES ($1, $2, $3) RETURNING id`,
			name, name+"@example.com", time.Now().UnixMicro())
		if err != nil {
			return err
		}
		email, err := c.EnqueueTx(ctx, tx, VerificationEmail{UserID: s.UserID}, nil)
		if err != nil {
			return err
		}
		s.Email = email.Job
		if bonusCents == 0 {
			return nil
		}
		s.CreditID, s.Credit, err = a.grantCredit(ctx, c, tx, s.UserID, bonusCents, "signup bonus")
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sign up %q: %w", name, err)
	}
	return &s, nil
}

// GrantCredit records a credit for a user and enqueues the job applying it,
// in one transaction.
func (a *App) GrantCredit(ctx context.Context, c *twice.Client, userID, cents int64, reason string) (int64, *twicetype.JobRow, error) {
	var (
		id  int64
		job *twicetype.JobRow
	)
	err := a.inTx(ctx, func(tx *sql.Tx) (err error) {
		id, job, err = a.grantCredit(ctx, c, tx, userID, cents, reason)
		return err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("grant credit to user %d: %w", userID, err)
	}
	return id, job, nil
}

func (a *App) grantCredit(ctx context.Context, c *twice.Client, tx *sql.Tx, userID, cents int64, reason string) (int64, *twicetype.JobRow, error) {
	id, err := a.insertID(ctx, tx, `INSERT INTO demo_credits (user_id, amount_cents, reason, created_at) VALUES ($1, $2, $3, $4) RETURNING id`,
		userID, cents, reason, time.Now().UnixMicro())
	if err != nil {
		return 0, nil, err
	}
	job, err := c.EnqueueTx(ctx, tx, CreditBalance{CreditID: id, UserID: userID, AmountCents: cents}, nil)
	if err != nil {
		return 0, nil, err
	}
	return id, job.Job, nil
}

// UploadImage stores an ad image and enqueues its watermark job, in one
// transaction.
func (a *App) UploadImage(ctx context.Context, c *twice.Client, name string) (int64, *twicetype.JobRow, error) {
	var (
		id  int64
		job *twicetype.JobRow
	)
	err := a.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		id, err = a.insertID(ctx, tx, `INSERT INTO demo_images (name, source, created_at) VALUES ($1, $2, $3) RETURNING id`,
			name, []byte("pixels of "+name), time.Now().UnixMicro())
		if err != nil {
			return err
		}
		r, err := c.EnqueueTx(ctx, tx, WatermarkImage{ImageID: id}, nil)
		if err != nil {
			return err
		}
		job = r.Job
		return nil
	})
	if err != nil {
		return 0, nil, fmt.Errorf("upload image %q: %w", name, err)
	}
	return id, job, nil
}

// Redeliver enqueues args again as the same message (the same message id,
// so the same idempotency key unless the args carry their own), as a
// broker or a retrying producer would.
func (a *App) Redeliver(ctx context.Context, c *twice.Client, args twice.Args, of *twicetype.JobRow) (*twicetype.JobRow, error) {
	res, err := c.Enqueue(ctx, args, &twice.EnqueueOpts{
		Queue: of.Queue, MessageID: of.MessageID, CorrelationID: of.CorrelationID,
	})
	if err != nil {
		return nil, fmt.Errorf("redeliver message %s: %w", of.MessageID, err)
	}
	return res.Job, nil
}

// DeleteUser deletes a user, as an account deletion would.
func (a *App) DeleteUser(ctx context.Context, id int64) error {
	_, err := a.db.ExecContext(ctx, a.q(`DELETE FROM demo_users WHERE id = $1`), id)
	return err
}

// ConfirmUser marks a user's address confirmed, as a click on an earlier
// verification link would.
func (a *App) ConfirmUser(ctx context.Context, id int64) error {
	_, err := a.db.ExecContext(ctx, a.q(`UPDATE demo_users SET confirmed = 1, verify_token_hash = '' WHERE id = $1`), id)
	return err
}

func (a *App) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := a.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback() // the error that made us roll back is the one to report
		return err
	}
	return tx.Commit()
}
