package twicehttp

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/twicejobs/twice/internal/logattr"
	"github.com/twicejobs/twice/twicestore"
)

// lockRefreshMin bounds how often a lock is refreshed, whatever
// LockTimeout says: a LockTimeout shorter than a few store round trips
// cannot be kept anyway.
const lockRefreshMin = 10 * time.Millisecond

// lockKeeper refreshes a running request's lock on its key every third of
// LockTimeout, as a job's lease is extended, so a handler that runs longer
// than LockTimeout keeps its key and a retry meanwhile gets 409, not a
// second run. LockTimeout then only bounds how long a crashed request (its
// process died, so nothing refreshes its lock) holds the key.
//
// Each refresh gives the lock a new identity (its time), which Complete
// and Release must carry; stop returns the last one.
type lockKeeper struct {
	store  KeyStore
	logger *slog.Logger
	ctx    context.Context
	params twicestore.IdempotencyKeyParams

	mu     sync.Mutex
	lost   bool // a refresh found the key no longer ours
	stopCh chan struct{}
	done   chan struct{}
}

// keepLock starts refreshing the lock p names (p.LockedAt is the lock
// Begin took) every interval. ctx carries the request's values; its
// cancellation is ignored, since the handler may run on after its client
// hung up, and its key with it.
func keepLock(ctx context.Context, store KeyStore, logger *slog.Logger, p twicestore.IdempotencyKeyParams, interval time.Duration) *lockKeeper {
	k := &lockKeeper{
		store: store, logger: logger, ctx: context.WithoutCancel(ctx), params: p,
		stopCh: make(chan struct{}), done: make(chan struct{}),
	}
	go k.loop(max(interval, lockRefreshMin))
	return k
}

func (k *lockKeeper) loop(interval time.Duration) {
	defer close(k.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-k.stopCh:
			return
		case <-t.C:
		}
		if !k.refresh() {
			return
		}
	}
}

// refresh extends the lock once and reports whether to go on. A refresh in
// flight is never cancelled by stop: the store may have moved the lock
// without the keeper learning its new identity, and the response could not
// be stored. It is bounded by StoreTimeout instead.
func (k *lockKeeper) refresh() bool {
	ctx, cancel := context.WithTimeout(k.ctx, StoreTimeout)
	defer cancel()
	k.mu.Lock()
	p := k.params
	k.mu.Unlock()
	res, err := k.store.IdempotencyExtend(ctx, &twicestore.IdempotencyExtendParams{
		Principal: p.Principal, Key: p.Key, LockedAt: p.LockedAt,
	})
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case errors.Is(err, twicestore.ErrNotFound):
		k.lost = true
		return false
	case err != nil:
		// The next tick tries again; the lock holds for LockTimeout from
		// the last refresh that worked.
		k.logger.WarnContext(ctx, "idempotency: refreshing the key's lock failed; trying again at the next refresh",
			slog.Any(logattr.Err, err), slog.String(logattr.Component, "twicehttp"))
		return true
	}
	k.params.LockedAt = res.LockedAt
	return true
}

// stop ends the refreshes, waiting for one in flight, and returns the lock
// the request now holds, or lost when a refresh found the key taken over
// (or expired) while the handler ran.
func (k *lockKeeper) stop() (p *twicestore.IdempotencyKeyParams, lost bool) {
	close(k.stopCh)
	<-k.done
	k.mu.Lock()
	defer k.mu.Unlock()
	params := k.params
	return &params, k.lost
}
