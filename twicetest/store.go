package twicetest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// errInjectedCrash is what an injected crash makes a transaction's commit
// fail with.
var errInjectedCrash = errors.New("twicetest: injected crash between the effect and its commit")

// errCrashAfterClaim is what an injected crash makes a ClaimBefore claim
// return, after the claim was written, so the handler never runs.
var errCrashAfterClaim = errors.New("twicetest: injected crash between the claim and the effect")

// crashPoint is where an injected crash strikes the first delivery.
type crashPoint int

const (
	noCrash          crashPoint = iota
	crashAfterEffect            // the handler returned; its outcome (and claim or commit) is lost
	crashAfterClaim             // a ClaimBefore claim was written; the handler never runs
	crashAtStepPoint            // a step boundary (probe.stepCrash); the outcome is lost
)

// probe watches the store traffic of one scenario, shared by every store
// handle of that scenario. It is safe for concurrent use.
type probe struct {
	kind string

	mu      sync.Mutex
	fetched map[int64]bool // distinct jobs of kind leased
	fetches int            // deliveries: leases of jobs of kind
	peeks   int            // MarkerPeek calls on the store
	claims  int            // MarkerClaim calls on the store (not in a transaction)
	begins  int            // transactions that claimed a job's marker (Transactional's; a step's are not counted)

	// barrier, when above zero, holds each fetch of kind until that many
	// distinct jobs were leased, so they run at once.
	barrier int
	arrived chan struct{} // closed when the barrier is reached

	calls int // handler calls of kind, counted by middleware
	// marker is the first marker the strategy touched: the handler name
	// and key the invariants read back.
	marker *twicestore.MarkerParams
	// around, if set, wraps each handler call of kind (invariant checks).
	around twice.Middleware

	// crash, when set, makes the first job of kind fetched die there.
	crash        crashPoint
	target       int64
	commitDone   bool // the target's transaction commit was failed
	finishLost   bool // the target's first outcome was dropped
	crashedAfter bool // the crash fired

	// steps are the named steps seen, in order (twice.Step); stepCrash,
	// when set, is the step boundary where the target's first delivery
	// dies, and stepFired is set once it did.
	steps     []stepSeen
	stepCrash *stepCrash
	stepFired bool
}

func newProbe(kind string) *probe {
	return &probe{kind: kind, fetched: map[int64]bool{}, arrived: make(chan struct{})}
}

// counts returns the deliveries and the marker traffic seen so far.
func (p *probe) counts() (fetches, peeks, claims, begins int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fetches, p.peeks, p.claims, p.begins
}

func (p *probe) crashFired() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.crashedAfter
}

// spyStore is a real store with the calls the probe watches overridden;
// everything else goes straight through.
type spyStore struct {
	twicestore.Store
	p *probe
}

// Unwrap names the real store, so the runtime finds its optional
// capabilities (LISTEN/NOTIFY, peeks made by the fetch) through the spy.
func (s *spyStore) Unwrap() twicestore.Store { return s.Store }

// JobFetch counts the deliveries of the probed kind, and the peeks the
// fetch made for them, and holds them at the barrier, if one is set.
func (s *spyStore) JobFetch(ctx context.Context, params *twicestore.JobFetchParams) (*twicestore.JobFetchResult, error) {
	res, err := s.Store.JobFetch(ctx, params)
	if err != nil {
		return res, err
	}
	p := s.p
	ours := false
	p.mu.Lock()
	for _, row := range res.Jobs {
		if row.Kind != p.kind {
			continue
		}
		ours = true
		p.fetches++
		if h, ok := params.Peek[row.Kind]; ok { // ClaimAfter's peek, made by the fetch
			p.peeks++
			p.noteMarker(&twicestore.MarkerParams{Handler: h, Key: row.Key})
		}
		p.fetched[row.ID] = true
		if p.crash != noCrash && p.target == 0 {
			p.target = row.ID
		}
	}
	wait := ours && p.barrier > 0
	if wait && len(p.fetched) >= p.barrier {
		select {
		case <-p.arrived:
		default:
			close(p.arrived)
		}
	}
	p.mu.Unlock()
	if wait {
		t := time.NewTimer(2 * time.Second)
		defer t.Stop()
		select {
		case <-p.arrived:
		case <-t.C: // the other copy never came; run this one anyway
		case <-ctx.Done():
		}
	}
	return res, nil
}

// MarkerPeek counts ClaimAfter's peeks.
func (s *spyStore) MarkerPeek(ctx context.Context, params *twicestore.MarkerParams) (*twicestore.MarkerPeekResult, error) {
	s.p.mu.Lock()
	s.p.peeks++
	s.p.noteMarker(params)
	s.p.mu.Unlock()
	return s.Store.MarkerPeek(ctx, params)
}

// MarkerClaim counts ClaimBefore's claims, and when a crash after the claim
// is armed, writes the target's first claim and then fails, so its handler
// never runs and (see JobFinish) its outcome is lost.
func (s *spyStore) MarkerClaim(ctx context.Context, params *twicestore.MarkerParams) (*twicestore.MarkerClaimResult, error) {
	p := s.p
	p.mu.Lock()
	p.claims++
	p.noteMarker(params)
	crash := p.crash == crashAfterClaim && params.JobID == p.target && !p.crashedAfter
	if crash {
		p.crashedAfter = true
	}
	p.mu.Unlock()
	res, err := s.Store.MarkerClaim(ctx, params)
	if crash && err == nil {
		return nil, errCrashAfterClaim
	}
	return res, err
}

// noteMarker remembers the first marker touched; p.mu must be held.
func (p *probe) noteMarker(m *twicestore.MarkerParams) {
	if p.marker == nil && m != nil {
		p.marker = &twicestore.MarkerParams{Handler: m.Handler, Key: m.Key}
	}
}

// seenMarker returns the first marker the strategy touched, or nil.
func (p *probe) seenMarker() *twicestore.MarkerParams {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.marker
}

// middleware counts the handler calls of the probed kind and runs the
// invariant hook around them.
func (p *probe) middleware(ctx context.Context, job *twicetype.JobRow, next func(context.Context) error) error {
	if job.Kind != p.kind {
		return next(ctx)
	}
	p.mu.Lock()
	p.calls++
	around := p.around
	p.mu.Unlock()
	if around != nil {
		return around(ctx, job, next)
	}
	return next(ctx)
}

// handlerCalls returns how many times the handler was called.
func (p *probe) handlerCalls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

// Begin wraps transactions, so a crash can strike at the commit; those of
// Transactional are counted at their marker claim.
func (s *spyStore) Begin(ctx context.Context) (twicestore.Tx, error) {
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &spyTx{Tx: tx, p: s.p}, nil
}

// JobFinish writes every outcome but the crashed job's first one (its
// ClaimAfter claim included), which it reports as not applied, the way a
// lost lease is: the worker forgets the job and its lease runs out.
func (s *spyStore) JobFinish(ctx context.Context, params *twicestore.JobFinishParams) (*twicestore.JobFinishResult, error) {
	p := s.p
	keep := make([]*twicestore.JobOutcome, 0, len(params.Outcomes))
	kept := make([]int, 0, len(params.Outcomes))
	p.mu.Lock()
	for i, o := range params.Outcomes {
		p.noteMarker(o.Marker)
		if p.crash != noCrash && o.ID == p.target && !p.finishLost {
			p.finishLost, p.crashedAfter = true, true
			continue
		}
		keep = append(keep, o)
		kept = append(kept, i)
	}
	p.mu.Unlock()
	res := &twicestore.JobFinishResult{Applied: make([]bool, len(params.Outcomes))}
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

// spyTx is a transaction whose commit an injected crash can fail.
type spyTx struct {
	twicestore.Tx
	p    *probe
	jobs []int64                // jobs this transaction completes
	step *twicestore.StepParams // the step a Transactional step's transaction claims
}

// MarkerClaim notes the marker a Transactional delivery claims.
func (t *spyTx) MarkerClaim(ctx context.Context, params *twicestore.MarkerParams) (*twicestore.MarkerClaimResult, error) {
	t.p.mu.Lock()
	t.p.begins++
	t.p.noteMarker(params)
	t.p.mu.Unlock()
	return t.Tx.MarkerClaim(ctx, params)
}

// JobFinish notes the jobs the transaction completes.
func (t *spyTx) JobFinish(ctx context.Context, params *twicestore.JobFinishParams) (*twicestore.JobFinishResult, error) {
	for _, o := range params.Outcomes {
		t.jobs = append(t.jobs, o.ID)
	}
	return t.Tx.JobFinish(ctx, params)
}

// Commit rolls back instead, once, when the transaction completes the job
// whose crash is armed: the process died before the commit.
func (t *spyTx) Commit(ctx context.Context) error {
	if handled, err := t.commitStep(ctx); handled {
		return err
	}
	t.p.mu.Lock()
	crash := false
	for _, id := range t.jobs {
		if t.p.crash == crashAfterEffect && id == t.p.target && !t.p.commitDone {
			t.p.commitDone, crash = true, true
		}
	}
	t.p.mu.Unlock()
	if crash {
		_ = t.Rollback(ctx)
		return errInjectedCrash
	}
	return t.Tx.Commit(ctx)
}
