package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
)

// Faults injects the failures the seed worries about through the real
// runtime: a crash between an email's send and its marker claim, and
// failures of the email sink. It is safe for concurrent use.
type Faults struct {
	mu sync.Mutex
	// crashes are armed by idempotency key (what a claim sees) and
	// fired by job id (what JobFinish sees).
	crashes map[string]*crash
	byJob   map[int64]*crash
	// sendFaults are the sink failures still to happen, per user.
	sendFaults map[int64]sendFault
	logger     *slog.Logger
}

type crash struct {
	jobID       int64
	claimFailed bool // the process "died" at the claim
	fired       bool // and its completion was never written
}

// sendFault is how the email sink fails a user's next send.
type sendFault int

const (
	// transientSend fails once with a retryable error (SMTP 421).
	transientSend sendFault = iota + 1
	// bounceSend fails once permanently (SMTP 550): the job is
	// dead-lettered until an operator retries it.
	bounceSend
)

func newFaults() *Faults {
	return &Faults{
		crashes:    map[string]*crash{},
		byJob:      map[int64]*crash{},
		sendFaults: map[int64]sendFault{},
		logger:     slog.Default(),
	}
}

// errInjectedCrash is what the marker claim of a crashed job fails with.
var errInjectedCrash = errors.New("demo: injected crash between send and claim")

// CrashAfterSend makes the first delivery of an email job behave as if its
// process died right after the send: the marker claim fails and the job's
// completion is never written. Its lease then expires, the rescuer requeues
// it, and the redelivery sends again — one duplicate email, the price
// ClaimAfter accepts to never lose one.
func (f *Faults) CrashAfterSend(jobID int64, key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := &crash{jobID: jobID}
	f.crashes[key] = c
	f.byJob[jobID] = c
}

// FailSendOnce makes the email sink refuse the next send to a user with a
// transient error; the runtime retries after its backoff.
func (f *Faults) FailSendOnce(userID int64) { f.setSendFault(userID, transientSend) }

// BounceOnce makes the email sink refuse the next send to a user
// permanently; the job is dead-lettered, and a retry from the dead-letter
// queue sends it.
func (f *Faults) BounceOnce(userID int64) { f.setSendFault(userID, bounceSend) }

func (f *Faults) setSendFault(userID int64, k sendFault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sendFaults[userID] = k
}

// CrashesFired counts the injected crashes that happened.
func (f *Faults) CrashesFired() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.byJob {
		if c.fired {
			n++
		}
	}
	return n
}

// sendFault returns the sink's failure for a send to userID, if one is due,
// and uses it up.
func (f *Faults) sendFault(userID int64) error {
	f.mu.Lock()
	k := f.sendFaults[userID]
	delete(f.sendFaults, userID)
	f.mu.Unlock()
	switch k {
	case transientSend:
		return fmt.Errorf("sink: 421 mailbox busy, try again later (injected for user %d)", userID)
	case bounceSend:
		return twice.Permanent(fmt.Errorf("sink: 550 mailbox unavailable (injected for user %d)", userID))
	}
	return nil
}

// failClaim reports whether the claim of key is where an armed crash
// strikes.
func (f *Faults) failClaim(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.crashes[key]
	if c == nil || c.claimFailed {
		return false
	}
	c.claimFailed = true
	return true
}

// dropFinish reports whether the outcome of job id dies with its process.
func (f *Faults) dropFinish(id int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.byJob[id]
	if c == nil || !c.claimFailed || c.fired {
		return false
	}
	c.fired = true
	return true
}

// faultStore is the real store with the two writes a crash would lose
// overridden; everything else goes straight through.
type faultStore struct {
	twicestore.Store
	f *Faults
}

// MarkerClaim fails for a job whose crash is armed.
func (s *faultStore) MarkerClaim(ctx context.Context, p *twicestore.MarkerParams) (*twicestore.MarkerClaimResult, error) {
	if s.f.failClaim(p.Key) {
		return nil, errInjectedCrash
	}
	return s.Store.MarkerClaim(ctx, p)
}

// JobFinish writes every outcome but a crashed job's (its claim included),
// which it reports as not applied, the way a lost lease is: the worker
// forgets the job and its lease runs out.
func (s *faultStore) JobFinish(ctx context.Context, p *twicestore.JobFinishParams) (*twicestore.JobFinishResult, error) {
	keep := make([]*twicestore.JobOutcome, 0, len(p.Outcomes))
	kept := make([]int, 0, len(p.Outcomes))
	for i, o := range p.Outcomes {
		// ClaimAfter's claim rides with the completion: an armed crash
		// strikes there, and both are lost with the process.
		if o.Marker != nil && s.f.failClaim(o.Marker.Key) {
			s.f.logger.WarnContext(ctx, "demo: injected crash at the claim", "job_id", o.ID)
		}
		if s.f.dropFinish(o.ID) {
			s.f.logger.WarnContext(ctx, "demo: injected crash: the email went out but the process died before its claim and completion; "+
				"the lease will expire and the job run again", "job_id", o.ID)
			continue
		}
		keep = append(keep, o)
		kept = append(kept, i)
	}
	res := &twicestore.JobFinishResult{Applied: make([]bool, len(p.Outcomes))}
	if len(keep) == 0 {
		return res, nil
	}
	inner, err := s.Store.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: keep})
	if err != nil {
		return nil, err
	}
	for j, i := range kept {
		res.Applied[i] = inner.Applied[j]
	}
	return res, nil
}

// faultListener is a faultStore on a store that also reports inserts
// (PostgreSQL's NOTIFY), so wrapping it for faults does not hide the
// wake-ups from the client.
type faultListener struct {
	*faultStore
	l twicestore.InsertListener
}

var _ twicestore.InsertListener = (*faultListener)(nil)

// ListenInserts is the wrapped store's.
func (s *faultListener) ListenInserts(ctx context.Context, notify func(queue string)) error {
	return s.l.ListenInserts(ctx, notify)
}
