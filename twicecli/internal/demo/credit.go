package demo

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twicejobs/twice"
)

// CreditBalance applies a credit the application granted to a user's
// balance. The credit's id is its idempotency key, so every message about
// the same credit converges to one ledger row, however it was enqueued.
type CreditBalance struct {
	CreditID    int64 `json:"credit_id"`
	UserID      int64 `json:"user_id"`
	AmountCents int64 `json:"amount_cents"`
}

// Kind names the message.
func (CreditBalance) Kind() string { return "balance.credit.v1" }

// IdempotencyKey is the credit's id.
func (c CreditBalance) IdempotencyKey() string { return strconv.FormatInt(c.CreditID, 10) }

// credit writes the ledger row and the balance in the job's transaction
// (the Transactional strategy): the marker claim, the effect and the job's
// completion commit together, so a redelivery finds the claim and rolls
// back to a no-op — exactly once. Everything goes through the job's
// transaction (job.SQLTx() on SQLite and MySQL, job.Tx().(pgx.Tx) on
// PostgreSQL): on
// SQLite a second connection would wait for the write lock this
// transaction holds, and on either it would escape the exactly-once
// commit.
func (a *App) credit(ctx context.Context, job *twice.Job[CreditBalance]) error {
	tx := jobTxOf(job.Tx())
	if tx == nil {
		return twice.Permanent(fmt.Errorf("balance.credit.v1 must be registered Transactional: it needs the job's transaction (got %T)", job.Tx()))
	}
	args := job.Args
	var exists bool
	if err := tx.QueryRow(ctx, a.q(`SELECT EXISTS (SELECT 1 FROM demo_users WHERE id = $1)`), args.UserID).Scan(&exists); err != nil {
		return fmt.Errorf("load user %d: %w", args.UserID, err)
	}
	if !exists {
		return twice.NoOp("user deleted")
	}
	if err := tx.Exec(ctx, a.q(`INSERT INTO demo_ledger (credit_id, user_id, amount_cents, job_id, applied_at)
		VALUES ($1, $2, $3, $4, $5)`), args.CreditID, args.UserID, args.AmountCents, job.ID, time.Now().UnixMicro()); err != nil {
		return fmt.Errorf("write ledger row of credit %d: %w", args.CreditID, err)
	}
	addToBalance, addArgs := `INSERT INTO demo_balances (user_id, cents) VALUES ($1, $2)
		ON CONFLICT (user_id) DO UPDATE SET cents = demo_balances.cents + excluded.cents`, []any{args.UserID, args.AmountCents}
	if a.dialect == mysqlDialect {
		// MySQL has no ON CONFLICT; the amount is bound again rather than
		// read with VALUES(), which MySQL 8.0.20 deprecates and MariaDB's
		// replacement syntax lacks.
		addToBalance = `INSERT INTO demo_balances (user_id, cents) VALUES (?, ?)
		ON DUPLICATE KEY UPDATE cents = cents + ?`
		addArgs = append(addArgs, args.AmountCents)
	}
	if err := tx.Exec(ctx, addToBalance, addArgs...); err != nil {
		return fmt.Errorf("add credit %d to balance: %w", args.CreditID, err)
	}
	twice.Logger(ctx).InfoContext(ctx, "credit applied", "credit_id", args.CreditID, "user_id", args.UserID,
		"amount_cents", args.AmountCents)
	return nil
}

// jobTx is a Transactional job's transaction, whichever driver began it.
type jobTx interface {
	Exec(ctx context.Context, query string, args ...any) error
	QueryRow(ctx context.Context, query string, args ...any) rowScanner
}

type rowScanner interface{ Scan(dest ...any) error }

// jobTxOf adapts the driver's transaction (job.Tx()): a *sql.Tx for
// SQLite and MySQL, a pgx.Tx for PostgreSQL. It returns nil for anything else,
// including no transaction at all.
func jobTxOf(tx any) jobTx {
	switch tx := tx.(type) {
	case *sql.Tx:
		if tx != nil {
			return sqlJobTx{tx}
		}
	case pgx.Tx:
		if tx != nil {
			return pgxJobTx{tx}
		}
	}
	return nil
}

type sqlJobTx struct{ tx *sql.Tx }

func (t sqlJobTx) Exec(ctx context.Context, query string, args ...any) error {
	_, err := t.tx.ExecContext(ctx, query, args...)
	return err
}

func (t sqlJobTx) QueryRow(ctx context.Context, query string, args ...any) rowScanner {
	return t.tx.QueryRowContext(ctx, query, args...)
}

type pgxJobTx struct{ tx pgx.Tx }

func (t pgxJobTx) Exec(ctx context.Context, query string, args ...any) error {
	_, err := t.tx.Exec(ctx, query, args...)
	return err
}

func (t pgxJobTx) QueryRow(ctx context.Context, query string, args ...any) rowScanner {
	return t.tx.QueryRow(ctx, query, args...)
}
