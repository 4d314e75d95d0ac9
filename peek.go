package twice

// ClaimAfter's peek costs a round trip per job unless the fetch makes it:
// every fetch is asked to peek the markers of the ClaimAfter jobs it
// leases (twicestore.JobFetchParams.Peek), so a job arrives with its
// answer (producer.Fetched.Peek). A job whose answer did not come with it
// (a wrapper that dropped the answers, a redelivery in a row) peeks on its
// own with MarkerPeek: a lost answer is "not peeked", never "not
// processed", so it costs a round trip, not a duplicate effect.

// fetchPeekHandlers names, per ClaimAfter kind, the handler whose marker
// fetches peek.
func (c *Client) fetchPeekHandlers() map[string]string {
	handlers := map[string]string{}
	for _, kind := range c.registry.Kinds() {
		if e := c.registry.lookup(kind); e != nil && e.opts.Strategy == ClaimAfter {
			handlers[kind] = e.opts.HandlerName
		}
	}
	return handlers
}
