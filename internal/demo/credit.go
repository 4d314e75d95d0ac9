package demo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

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
// back to a no-op — exactly once. Everything goes through job.SQLTx(): a
// second connection would wait for the write lock this transaction holds.
func (a *App) credit(ctx context.Context, job *twice.Job[CreditBalance]) error {
	tx := job.SQLTx()
	if tx == nil {
		return twice.Permanent(errors.New("balance.credit.v1 must be registered Transactional: it needs the job's transaction"))
	}
	args := job.Args
	var exists bool
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM demo_users WHERE id = ?)`, args.UserID).Scan(&exists); err != nil {
		return fmt.Errorf("load user %d: %w", args.UserID, err)
	}
	if !exists {
		return twice.NoOp("user deleted")
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO demo_ledger (credit_id, user_id, amount_cents, job_id, applied_at)
		VALUES (?, ?, ?, ?, ?)`, args.CreditID, args.UserID, args.AmountCents, job.ID, time.Now().UnixMicro()); err != nil {
		return fmt.Errorf("write ledger row of credit %d: %w", args.CreditID, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO demo_balances (user_id, cents) VALUES (?, ?)
		ON CONFLICT (user_id) DO UPDATE SET cents = cents + excluded.cents`, args.UserID, args.AmountCents); err != nil {
		return fmt.Errorf("add credit %d to balance: %w", args.CreditID, err)
	}
	twice.Logger(ctx).InfoContext(ctx, "credit applied", "credit_id", args.CreditID, "user_id", args.UserID,
		"amount_cents", args.AmountCents)
	return nil
}
