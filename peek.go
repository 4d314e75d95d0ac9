package twice

import "github.com/twicejobs/twice/twicestore"

// ClaimAfter's peek costs a round trip per job unless the fetch makes it.
// A store that answers peeks in batches (twicestore.MarkerBatchPeeker) is
// asked to peek in the fetch itself, so a job arrives with its answer
// (producer.Fetched.Peek). A job whose answer did not come with it (a
// store without the capability, a wrapper that dropped the answers, a
// redelivery in a row) peeks on its own with MarkerPeek: a lost answer is
// "not peeked", never "not processed", so it costs a round trip, not a
// duplicate effect.

// fetchPeekHandlers names, per ClaimAfter kind, the handler whose marker
// fetches peek; nil when the store does not answer peeks in batches. A
// wrapper that names its store (twicestore.Unwrapper) passes the fetch's
// peeks through, so its store's capability counts.
func (c *Client) fetchPeekHandlers() map[string]string {
	if _, ok := twicestore.As[twicestore.MarkerBatchPeeker](c.store); !ok {
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
