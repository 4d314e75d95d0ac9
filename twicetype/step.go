package twicetype

import "time"

// Step is one named step of a handler for one message key, as a stepped
// handler (twice.Step) records it: claimed first or last depending on its
// strategy, and done once its receipt is stored. A redelivered job returns
// a done step's receipt instead of running the step again.
type Step struct {
	Handler string
	Key     string
	Step    string
	// Strategy is the step's strategy as twice names it (claim-before,
	// claim-after, transactional): a later run of the same step under
	// another strategy is refused.
	Strategy  string
	ClaimedAt time.Time
	// DoneAt is zero while the step is claimed but not finished: a
	// claim-before step whose effect may or may not have happened.
	DoneAt time.Time
	// Receipt is the step's result as JSON (a provider's charge id, say).
	Receipt []byte
	// JobID and Epoch name the delivery that claimed the step.
	JobID int64
	Epoch int64
}

// Done reports whether the step finished and stored its receipt.
func (s *Step) Done() bool { return !s.DoneAt.IsZero() }
