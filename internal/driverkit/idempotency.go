package driverkit

import (
	"encoding/json"
	"fmt"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/twicetype"
)

// ScanIdempotency reads into rec one row of twice_idempotency, its columns
// selected as the lead destinations' (a driver that selects principal and
// key), then fingerprint, done, status, header (JSON text), body,
// locked_at, created_at, expires_at; its times read as tm says.
func ScanIdempotency[T, N any](tm Times[T, N], r dbrows.Scanner, rec *twicetype.IdempotencyRecord, lead ...any) error {
	var (
		header                   string
		locked, created, expires T
	)
	dest := append(lead, &rec.Fingerprint, &rec.Done, &rec.Status, &header, &rec.Body, &locked, &created, &expires)
	if err := r.Scan(dest...); err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(header), &rec.Header); err != nil {
		return fmt.Errorf("decode header: %w", err)
	}
	rec.LockedAt, rec.CreatedAt, rec.ExpiresAt = tm.At(locked), tm.At(created), tm.At(expires)
	return nil
}
