package twicepg

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twicejobs/twice/twicestore"
)

// TestClaimBehindFrozenHolder (issue 12 item 14): a Transactional job's
// holder froze with its marker claim inserted and not committed; the job
// was rescued, and the new holder's claim of the same marker must not wait
// for the frozen transaction indefinitely. It gives up after
// ClaimLockTimeout with twicestore.ErrLockTimeout, so the attempt fails and
// is retried; once the frozen holder commits, the retry finds the effect
// done. The wait is logged, not asserted.
func TestClaimBehindFrozenHolder(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, connString := openStore(t)
	rescuer := openAt(t, connString) // the node that took the rescued job
	m := &twicestore.MarkerParams{Handler: "test.frozen", Key: "k", JobID: 1, Epoch: 1}

	frozen, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = frozen.Rollback(ctx) }()
	if res, err := frozen.MarkerClaim(ctx, m); err != nil || res.AlreadyProcessed {
		t.Fatalf("frozen holder's claim: %+v, %v", res, err)
	}

	tx, err := rescuer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = tx.MarkerClaim(ctx, &twicestore.MarkerParams{Handler: m.Handler, Key: m.Key, JobID: 1, Epoch: 2})
	waited := time.Since(start)
	t.Logf("the claim behind a frozen holder returned after %s (ClaimLockTimeout %s)", waited, ClaimLockTimeout)
	if !errors.Is(err, twicestore.ErrLockTimeout) {
		t.Fatalf("claim behind a frozen holder: %v, want ErrLockTimeout", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// The frozen holder wakes and commits its effect: the retry sees it.
	if err := frozen.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	retry, err := rescuer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = retry.Rollback(ctx) }()
	res, err := retry.MarkerClaim(ctx, &twicestore.MarkerParams{Handler: m.Handler, Key: m.Key, JobID: 1, Epoch: 3})
	if err != nil || !res.AlreadyProcessed || res.Existing.Epoch != 1 {
		t.Fatalf("retried claim: %+v, %v; want the frozen holder's claim of epoch 1", res, err)
	}
}

// TestClaimLockTimeoutIsTheClaimsOnly: the bound on the claim's wait is put
// back after the claim, so the handler's own statements in the same
// transaction wait as the session says.
func TestClaimLockTimeoutIsTheClaimsOnly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, _ := openStore(t)
	tx, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var before, after string
	if err := tx.Unwrap().(pgx.Tx).QueryRow(ctx, `SHOW lock_timeout`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.MarkerClaim(ctx, &twicestore.MarkerParams{Handler: "test.restore", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Unwrap().(pgx.Tx).QueryRow(ctx, `SHOW lock_timeout`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("lock_timeout after a claim = %q, want %q as before it", after, before)
	}
}
