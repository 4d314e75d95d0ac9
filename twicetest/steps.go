package twicetest

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// ScenarioCrashStep prefixes the scenarios of a stepped handler
// (twice.Step) that crash its first delivery at a step boundary; the rest
// of the name says which step and which boundary.
const ScenarioCrashStep = "crash at step"

// errCrashAtStep is what an injected crash at a step boundary makes the
// store call there return.
var errCrashAtStep = errors.New("twicetest: injected crash at a step boundary")

// stepSeen is a step of the handler as its store traffic shows it.
type stepSeen struct {
	name     string
	strategy string // twice.Strategy's String form
}

// stepCrash is where a crash strikes a step: at call ("get", "claim",
// "complete" or "commit") of step, after the call's write when after is
// set.
type stepCrash struct {
	step  string
	call  string
	after bool
	// label names the boundary in the scenario's name.
	label string
	// uncertain: the step is claim-before and the crash left its claim
	// unfinished, so the job must end dead for a person.
	uncertain bool
}

// stepBoundaries lists the boundaries of a step of strategy s.
func stepBoundaries(s stepSeen) []stepCrash {
	switch s.strategy {
	case twice.ClaimBefore.String():
		return []stepCrash{
			{s.name, "claim", false, "before its claim", false},
			{s.name, "claim", true, "between its claim and its effect", true},
			{s.name, "complete", false, "between its effect and its receipt", true},
			{s.name, "complete", true, "after its receipt", false},
		}
	case twice.ClaimAfter.String():
		return []stepCrash{
			{s.name, "get", false, "before its effect", false},
			{s.name, "claim", false, "between its effect and its claim", false},
			{s.name, "claim", true, "after its claim", false},
		}
	case twice.Transactional.String():
		return []stepCrash{
			{s.name, "claim", false, "before its claim", false},
			{s.name, "commit", false, "before its commit", false},
			{s.name, "commit", true, "after its commit", false},
		}
	}
	return nil
}

// noteStep records a step seen in the traffic; p.mu must be held.
func (p *probe) noteStep(sp *twicestore.StepParams) {
	for _, s := range p.steps {
		if s.name == sp.Step {
			return
		}
	}
	p.steps = append(p.steps, stepSeen{name: sp.Step, strategy: sp.Strategy})
}

// strikeStep reports whether the armed step crash fires at this call of
// the target's first delivery; p.mu must not be held.
func (p *probe) strikeStep(call string, sp *twicestore.StepParams) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.noteStep(sp)
	c := p.stepCrash
	if c == nil || p.stepFired || c.call != call || c.step != sp.Step || sp.JobID != p.target {
		return false
	}
	p.stepFired = true
	return true
}

// StepGet is ClaimAfter's peek of a step; a crash before the effect
// strikes here.
func (s *spyStore) StepGet(ctx context.Context, sp *twicestore.StepParams) (*twicetype.Step, error) {
	if s.p.strikeStep("get", sp) {
		return nil, errCrashAtStep
	}
	return s.Store.StepGet(ctx, sp)
}

// StepClaim claims a step, or crashes there (after the write, when armed
// so).
func (s *spyStore) StepClaim(ctx context.Context, sp *twicestore.StepParams) (*twicestore.StepClaimResult, error) {
	return stepClaim(ctx, s.p, s.Store, sp)
}

func stepClaim(ctx context.Context, p *probe, ex twicestore.Executor, sp *twicestore.StepParams) (*twicestore.StepClaimResult, error) {
	if !p.strikeStep("claim", sp) {
		return ex.StepClaim(ctx, sp)
	}
	if p.stepCrash.after {
		if _, err := ex.StepClaim(ctx, sp); err != nil {
			return nil, err
		}
	}
	return nil, errCrashAtStep
}

// StepComplete stores a step's receipt, or crashes there.
func (s *spyStore) StepComplete(ctx context.Context, sp *twicestore.StepParams) error {
	if !s.p.strikeStep("complete", sp) {
		return s.Store.StepComplete(ctx, sp)
	}
	if s.p.stepCrash.after {
		if err := s.Store.StepComplete(ctx, sp); err != nil {
			return err
		}
	}
	return errCrashAtStep
}

// StepClaim in a transaction: a Transactional step's claim.
func (t *spyTx) StepClaim(ctx context.Context, sp *twicestore.StepParams) (*twicestore.StepClaimResult, error) {
	t.step = sp
	return stepClaim(ctx, t.p, t.Tx, sp)
}

// commitStep crashes a Transactional step's commit when armed; it reports
// whether it handled the commit.
func (t *spyTx) commitStep(ctx context.Context) (bool, error) {
	if t.step == nil || !t.p.strikeStep("commit", t.step) {
		return false, nil
	}
	if t.p.stepCrash.after {
		if err := t.Tx.Commit(ctx); err != nil {
			return true, err
		}
	} else {
		_ = t.Rollback(ctx)
	}
	return true, errCrashAtStep
}

// stepsSeen returns the steps seen so far, in order.
func (p *probe) stepsSeen() []stepSeen {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.steps)
}

// crashAtStep makes the first delivery die at step boundary c: the store
// call there fails (after its write, when c.after), and the delivery's
// outcome is lost with the process; its lease expires and the message is
// delivered again, which must resume at the first unfinished step.
func (r *runner[T]) crashAtStep(c stepCrash) ScenarioReport {
	name := fmt.Sprintf("%s %q %s", ScenarioCrashStep, c.step, c.label)
	p := newProbe(r.kind)
	p.crash, p.stepCrash = crashAtStepPoint, &c
	store := r.stores(1, p)[0]
	client, stop := r.start(store)
	defer stop()
	var steps map[string]int
	sr := r.measure(name, p, store.Store, func() twicetype.JobState {
		before := r.stepEffects(store.Store)
		state := r.await(store, name, c.uncertain, r.enqueue(client, newMessageID("step"), 1)...)
		if after := r.stepEffects(store.Store); after != nil {
			steps = map[string]int{}
			for _, s := range r.steps {
				steps[s.name] = after[s.name] - before[s.name]
			}
		}
		return state
	})
	p.mu.Lock()
	fired := p.stepFired
	p.mu.Unlock()
	if !fired {
		r.t.Fatalf("twicetest: kind %q, scenario %q: the injected crash never fired", r.kind, name)
	}
	sr.Steps = steps
	sr.Promise, sr.Broken = judgeStep(c, r.steps, sr.Outcome, steps)
	return sr
}

// stepEffects reads Case.StepEffects, if set; a scenario judges the
// change over it.
func (r *runner[T]) stepEffects(store twicestore.Store) map[string]int {
	r.t.Helper()
	if r.c.StepEffects == nil {
		return nil
	}
	m, err := r.c.StepEffects(context.Background(), store)
	if err != nil {
		r.t.Fatalf("twicetest: Case.StepEffects: %v", err)
	}
	return m
}

// judgeStep tells what a crash at boundary c promises and whether the
// outcome and the per-step effects keep it. A crash that leaves a
// claim-before step's claim unfinished must dead-letter the job (its
// effect may have happened) with that step's effect at most once and no
// later step run; any other crash must complete the job with every step's
// effect exactly once, but a claim-after step crashed between its effect
// and its claim, which may run twice.
func judgeStep(c stepCrash, steps []stepSeen, outcome twicetype.JobState, effects map[string]int) (string, bool) {
	if c.uncertain {
		promise := fmt.Sprintf("job dead-lettered for a person to check whether step %q happened; it ran at most once, "+
			"and no later step ran", c.step)
		broken := outcome != twicetype.JobStateDead
		if effects != nil {
			later := false
			for _, s := range steps {
				n := effects[s.name]
				switch {
				case s.name == c.step:
					broken = broken || n > 1
					later = true
				case later:
					broken = broken || n != 0
				}
			}
		}
		return promise, broken
	}
	promise := "job completed, every step's effect exactly once"
	if c.call == "claim" && !c.after && c.label == "between its effect and its claim" {
		promise = fmt.Sprintf("job completed, every step's effect exactly once, but step %q's once or twice "+
			"(its claim was lost with the process)", c.step)
	}
	broken := outcome != twicetype.JobStateCompleted
	for _, s := range steps {
		if effects == nil {
			break
		}
		n, hi := effects[s.name], 1
		if s.name == c.step && c.label == "between its effect and its claim" {
			hi = 2
		}
		broken = broken || n < 1 || n > hi
	}
	return promise, broken
}
