package twicestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twicejobs/twice/internal/freetext"
	"github.com/twicejobs/twice/twicetype"
)

// ErrFenced means a write for a job came from a delivery that no longer
// holds it: the job left running or was leased again under a newer epoch.
// The stale holder must stop; the job's new holder decides what happens.
var ErrFenced = errors.New("twicestore: the job's lease moved on; a stale holder cannot write for it")

// MaxReceiptBytes caps a step's receipt: a receipt is a small record (a
// charge id, a message id) read back on every redelivery, not a place for
// documents.
const MaxReceiptBytes = 4 << 10

// MaxOutputBytes caps a job's recorded output, which is stored on the
// job's row and read by JobResult, Wait and dependants.
const MaxOutputBytes = 64 << 10

// StepExecutor is the part of Executor that named steps and job output
// use. Every step write is fenced: it applies only while the job JobID is
// running under lease Epoch, and fails with an error wrapping ErrFenced
// otherwise.
type StepExecutor interface {
	// StepGet returns a step, or ErrNotFound.
	StepGet(ctx context.Context, p *StepParams) (*twicetype.Step, error)
	// StepClaim claims a step for the job and epoch of p, done at once
	// with p.Receipt when p.Done is set. A step already claimed (by this
	// or any delivery) is left as it is and returned as Existing, even to
	// a delivery whose fence no longer holds: that writes nothing.
	StepClaim(ctx context.Context, p *StepParams) (*StepClaimResult, error)
	// StepComplete stores the receipt of a step this delivery (JobID and
	// Epoch) claimed and marks it done; ErrNotFound when this delivery
	// holds no unfinished claim of it.
	StepComplete(ctx context.Context, p *StepParams) error
	// StepRelease deletes this delivery's unfinished claim of a step, so a
	// retry runs it again; releasing a step not claimed is not an error.
	StepRelease(ctx context.Context, p *StepParams) error
	// StepSettle settles an unfinished claim for a person who checked
	// whether the step's effect happened, unfenced: with a Receipt it
	// marks the step done with it (the effect happened), without one it
	// deletes the claim (it did not). ErrNotFound when the step has no
	// unfinished claim; ErrStepRunning, settling nothing, when the job
	// that claimed it is running (its delivery may be in the effect).
	// Checked like a claim (CheckSettle).
	StepSettle(ctx context.Context, p *StepParams) error
	// StepPrune deletes up to Limit steps claimed before Before, oldest
	// first; a Limit of zero or less deletes them all.
	StepPrune(ctx context.Context, p *MarkerPruneParams) (*MarkerPruneResult, error)
	// JobOutput returns a job's state and the output its completion
	// recorded, or ErrNotFound.
	JobOutput(ctx context.Context, p *JobGetParams) (*JobOutputResult, error)
	// StepList lists the steps of one handler and message key, by step
	// name, at most Limit of them when Limit is positive: what a
	// redelivery of the message would find.
	StepList(ctx context.Context, p *StepListParams) (*StepListResult, error)
}

// StepListParams name the handler and key whose steps to list.
type StepListParams struct {
	Handler string
	Key     string
	// Limit bounds the steps listed; zero or less lists them all.
	Limit int
}

// StepListResult holds the steps, by name.
type StepListResult struct {
	Steps []*twicetype.Step
}

// StepParams name one step of one delivery.
type StepParams struct {
	Handler string
	Key     string
	Step    string
	// Strategy is recorded with a claim.
	Strategy string
	// JobID and Epoch are the delivery's job and lease epoch: the fence.
	JobID int64
	Epoch int64
	// Done makes StepClaim store the step as done, with Receipt.
	Done bool
	// Receipt is the step's result as JSON, at most MaxReceiptBytes.
	Receipt []byte
	// Now is when the write happens; the current time when zero.
	Now time.Time
	// FenceWithoutLock checks the fence without holding the job's row
	// until the transaction ends. Set it for a write in a transaction that
	// goes on working (a claim before the step's effect, any write in a
	// Transactional job's own transaction, whose epoch-guarded completion
	// fences it at commit): a held row would stop the job's heartbeats.
	// Drivers with one writer at a time may ignore it.
	FenceWithoutLock bool
}

// StepClaimResult answers a claim.
type StepClaimResult struct {
	// Claimed is set when this call claimed the step.
	Claimed bool
	// Existing is the step found when it was already claimed.
	Existing *twicetype.Step
}

// JobOutputResult is a job's state and recorded output.
type JobOutputResult struct {
	State twicetype.JobState
	// Output is the JSON its completion recorded; nil when none was.
	Output []byte
	// Error is the last attempt's error, if any, for a job that did not
	// complete.
	Error string
	// Note says why the job finished as it did.
	Note string
}

// FinishListener is implemented by stores that can tell a waiting process
// at once that a job finished (PostgreSQL's LISTEN/NOTIFY). Without it,
// Client.Wait polls.
type FinishListener interface {
	// JobAwait marks a job as awaited, so its finish is notified, and
	// returns its state and output as JobOutput does.
	JobAwait(ctx context.Context, p *JobGetParams) (*JobOutputResult, error)
	// ListenFinished calls notify with the id of every awaited job that
	// finishes (completed, dead or cancelled, in any process), until ctx
	// is done, reconnecting by itself like ListenInserts; it returns ctx's
	// error. listening, if set, is called each time it (re)starts to
	// listen, so a waiter can check the job's state again after a gap.
	ListenFinished(ctx context.Context, notify func(jobID int64), listening func()) error
}

// CheckStep reports a step write that cannot be fenced or named, or that
// holds a value no driver can store.
func (p *StepParams) CheckStep() error {
	if p.JobID <= 0 || p.Epoch <= 0 {
		return errors.New("step: a step write needs the job id and lease epoch that fence it")
	}
	return p.CheckSettle()
}

// CheckSettle reports a step's name or receipt that cannot be written: a
// missing name, a receipt over MaxReceiptBytes, or text no driver can
// store (a NUL byte, bytes that are not UTF-8; ErrUnstorable), which
// SQLite would store and PostgreSQL refuse.
func (p *StepParams) CheckSettle() error {
	switch {
	case p.Handler == "" || p.Step == "":
		return errors.New("step: handler and step name are required")
	case len(p.Receipt) > MaxReceiptBytes:
		return ErrReceiptTooLarge
	}
	for _, f := range [...]struct{ what, text string }{
		{"handler", p.Handler}, {"key", p.Key}, {"step name", p.Step}, {"receipt", string(p.Receipt)},
	} {
		if at := freetext.UnstorableAt(f.text); at >= 0 {
			return fmt.Errorf("step %q: its %s holds a NUL byte or bytes that are not UTF-8 (at byte %d): %w",
				p.Step, f.what, at, ErrUnstorable)
		}
	}
	return nil
}

// ErrStepRunning means StepSettle was asked to settle the claim of a step
// whose job is running: its delivery may be running the step's effect
// right now, so only that delivery may finish or release it. Settle a
// claim once its job is dead (ErrEffectUncertain), cancelled or waiting.
var ErrStepRunning = errors.New("twicestore: the step's claim belongs to a job that is running")

// ErrReceiptTooLarge means a step's receipt is over MaxReceiptBytes.
var ErrReceiptTooLarge = errors.New("twicestore: step receipt is over MaxReceiptBytes (4 KiB); store a reference (an id) instead of the document")
