package twice

import (
	"context"
	"sync"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// ClaimAfter's peek costs a round trip per job unless it is batched. A
// store that answers peeks in batches (twicestore.MarkerBatchPeeker) is
// asked to peek in the fetch itself, so a job arrives with its answer;
// a job whose answer did not come with it (redelivered in a row, fetched
// through a store without the capability) peeks in a batch with the jobs
// starting at the same time, or on its own. A store wrapper that overrides
// MarkerPeek (a spy, a fault injector) does not implement the batch
// interface unless it means to, so it keeps seeing every peek.

// fetchPeeks holds the answers fetches brought for the jobs being worked,
// by lease, each taken at most once: a second delivery of the same lease
// (Config.Redeliver) peeks again and sees the first one's claim.
type fetchPeeks struct {
	mu      sync.Mutex
	answers map[twicestore.JobLease]bool
}

func (f *fetchPeeks) put(l twicestore.JobLease, processed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.answers == nil {
		f.answers = make(map[twicestore.JobLease]bool)
	}
	f.answers[l] = processed
}

func (f *fetchPeeks) take(l twicestore.JobLease) (processed, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	processed, ok = f.answers[l]
	delete(f.answers, l)
	return processed, ok
}

// fetchPeekHandlers names, per ClaimAfter kind, the handler whose marker
// fetches peek; nil when the store does not answer peeks in batches.
func (c *Client) fetchPeekHandlers() map[string]string {
	if c.peeks == nil {
		return nil
	}
	handlers := map[string]string{}
	for _, kind := range c.registry.Kinds() {
		if e := c.registry.lookup(kind); e != nil && e.opts.Strategy == ClaimAfter {
			handlers[kind] = e.opts.HandlerName
		}
	}
	return handlers
}

// runFetched works a fetched job, leaving the fetch's peek of its marker
// for ClaimAfter's peek to take, and dropping it if the job never peeked
// (held by a kill switch, say).
func (c *Client) runFetched(row *twicetype.JobRow, processed bool) {
	if e := c.registry.lookup(row.Kind); e != nil && c.peeks != nil && e.opts.Strategy == ClaimAfter {
		l := leaseOf(row)
		c.fetchPeeks.put(l, processed)
		defer c.fetchPeeks.take(l)
	}
	c.work(row)
}

// peekMarker is ClaimAfter's peek for row: the fetch's answer when it
// brought one, else batched with the peeks of the jobs starting at the same
// time when the store answers many at once, else one MarkerPeek.
func (c *Client) peekMarker(ctx context.Context, row *twicetype.JobRow, m *twicestore.MarkerParams) (*twicestore.MarkerPeekResult, error) {
	if processed, ok := c.fetchPeeks.take(leaseOf(row)); ok {
		return &twicestore.MarkerPeekResult{Processed: processed}, nil
	}
	if c.peeks != nil {
		return c.peeks.Peek(ctx, m)
	}
	return c.store.MarkerPeek(ctx, m)
}
