package twicehttp

import (
	"context"

	"github.com/twicejobs/twice/twicestore"
)

// KeyStore is what the middleware needs of a store: its Idempotency-Key
// records. Every twice store (twicesqlite's, twicepg's) is one; the
// records are pruned by a running worker's retention.
type KeyStore interface {
	IdempotencyBegin(ctx context.Context, p *twicestore.IdempotencyBeginParams) (*twicestore.IdempotencyBeginResult, error)
	IdempotencyExtend(ctx context.Context, p *twicestore.IdempotencyExtendParams) (*twicestore.IdempotencyExtendResult, error)
	IdempotencyComplete(ctx context.Context, p *twicestore.IdempotencyCompleteParams) error
	IdempotencyRelease(ctx context.Context, p *twicestore.IdempotencyKeyParams) error
}
