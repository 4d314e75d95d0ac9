package twice

import "fmt"

// Strategy is how the runtime makes a kind's effect converge when a message
// is delivered more than once. It is chosen per kind at registration.
type Strategy int

const (
	// ClaimAfter — duplicates over loss (emails, notifications). The runtime
	// peeks the marker; if processed, the job completes as a no-op without
	// calling the handler. Otherwise it runs the handler and, on success
	// only, claims the marker in the same transaction as the job's
	// completion, on a context the handler's cancellation cannot reach. A
	// crash between the effect and that write costs one duplicate effect.
	ClaimAfter Strategy = iota
	// ClaimBefore — loss over duplicates (a charge without a provider key).
	// The runtime claims first; a duplicate claim is a no-op. A failure
	// leaves the claim and dead-letters the job for a human, because the
	// effect may have happened, unless the handler returns NotApplied.
	ClaimBefore
	// Transactional — exactly once, for effects in the job store's database.
	// The handler gets the transaction; the claim, the effect and the job's
	// completion commit together, and a duplicate claim rolls back to a
	// no-op.
	Transactional
	// None — the effect is idempotent by itself (a content-addressed write),
	// so no marker is used.
	None
)

var strategyNames = [...]string{"claim-after", "claim-before", "transactional", "none"}

func (s Strategy) String() string {
	if s >= 0 && int(s) < len(strategyNames) {
		return strategyNames[s]
	}
	return fmt.Sprintf("Strategy(%d)", int(s))
}

// ParseStrategy parses a strategy's String form.
func ParseStrategy(s string) (Strategy, error) {
	for i, n := range strategyNames {
		if n == s {
			return Strategy(i), nil
		}
	}
	return 0, fmt.Errorf("unknown strategy %q: use one of claim-after, claim-before, transactional, none", s)
}
