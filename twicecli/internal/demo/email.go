package demo

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/twicejobs/twice"
)

// VerificationEmail asks for the partner-verification email of a user. It
// carries the user's id only: the address is loaded and the single-use
// token regenerated when the job runs, so neither sits in the job table.
type VerificationEmail struct {
	UserID int64 `json:"user_id"`
}

// Kind names the message.
func (VerificationEmail) Kind() string { return "email.partner-verification.v1" }

// verifyBaseURL is where the verification link points.
const verifyBaseURL = "https://partners.example.com/verify"

// sendVerification sends (writes to the outbox sink) the verification
// email. The runtime peeks the marker before and claims it after (the
// ClaimAfter strategy), so a duplicate is possible only when the process
// dies between the send and the claim — duplicates over loss.
func (a *App) sendVerification(ctx context.Context, job *twice.Job[VerificationEmail]) error {
	log := twice.Logger(ctx)
	var (
		name, addr string
		confirmed  bool
	)
	err := a.db.QueryRowContext(ctx, a.q(`SELECT name, email, confirmed FROM demo_users WHERE id = $1`), job.Args.UserID).
		Scan(&name, &addr, &confirmed)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return twice.NoOp("user deleted")
	case err != nil:
		return fmt.Errorf("load user %d: %w", job.Args.UserID, err)
	case confirmed:
		return twice.NoOp("already confirmed")
	}
	if err := a.faults.sendFault(job.Args.UserID); err != nil {
		return err
	}

	// A fresh single-use token per send: only its hash is kept, and it
	// replaces the previous one, so an older link stops working.
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return fmt.Errorf("generate token: %w", err)
	}
	token := hex.EncodeToString(raw)
	sum := sha256.Sum256([]byte(token))
	link := verifyBaseURL + "?" + url.Values{
		"user":  {strconv.FormatInt(job.Args.UserID, 10)},
		"token": {token},
	}.Encode()

	err = a.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, a.q(`UPDATE demo_users SET verify_token_hash = $1 WHERE id = $2`),
			hex.EncodeToString(sum[:]), job.Args.UserID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, a.q(`INSERT INTO demo_outbox
			(user_id, to_addr, subject, url, message_key, job_id, attempt, sent_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`),
			job.Args.UserID, addr, "Verify your partner account, "+name, link, job.Key, job.ID, job.Attempt,
			time.Now().UnixMicro())
		return err
	})
	if err != nil {
		return fmt.Errorf("send verification email to user %d: %w", job.Args.UserID, err)
	}
	log.InfoContext(ctx, "verification email sent", "user_id", job.Args.UserID)
	return nil
}
