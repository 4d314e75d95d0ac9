package twice

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/twicejobs/twice/internal/freetext"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// Durable waits: a handler that needs something from outside (an
// approval, a provider's callback, the passing of a day) asks for it with
// AwaitSignal or Sleep. When it is there, the call returns it. When it is
// not, the call returns a *WaitError, which the handler returns: the job
// is parked (state waiting) with no lease, no concurrency slot and no
// attempt spent, and runs again from the top when a signal of the wait's
// name arrives (Client.Signal) or its timer fires. The steps it finished
// keep their receipts (twice.Step), and the wait returns what resolved it.
//
// A job keeps one resolution per wait name, the first to arrive: a signal
// sent again is a no-op that says so (SignalResult.Duplicate), a signal
// that races its wait's timer loses or wins as a whole, and a signal sent
// before the handler awaits it is kept for the await.

// NoTimeout is the timeout of a wait that waits for its signal for ever
// (until the job is cancelled).
const NoTimeout time.Duration = math.MaxInt64

// ErrWaitTimedOut is what AwaitSignal returns when the wait's timeout
// passed before a signal of its name arrived. The handler can branch on
// it (errors.Is): escalate, cancel, or go on without.
var ErrWaitTimedOut = errors.New("twice: the wait timed out before its signal arrived")

// WaitError parks the job until the signal Name arrives or Until passes
// (zero: no timeout). AwaitSignal and Sleep return it when what they wait
// for has not happened yet; return it from the handler (wrapped or not).
type WaitError struct {
	Name  string
	Until time.Time
}

func (e *WaitError) Error() string {
	if e.Until.IsZero() {
		return fmt.Sprintf("waiting for signal %q", e.Name)
	}
	return fmt.Sprintf("waiting for signal %q until %s", e.Name, e.Until.UTC().Format(time.RFC3339))
}

// AwaitSignal returns the payload of the signal name sent to the job
// whose handler ctx is, decoded into T. Until the signal arrives it
// returns a *WaitError: return it, and the job waits, holding nothing,
// for the signal or for timeout (NoTimeout: for ever); the handler then
// runs again from the top. When the timeout passes first, it returns
// ErrWaitTimedOut, now and on every later run of the job.
//
// The name is UTF-8 text of at most MaxNameBytes without NUL bytes; a
// timeout of zero or less is refused (ErrInvalidInput): use NoTimeout.
// A payload that does not decode into T fails the job permanently.
func AwaitSignal[T any](ctx context.Context, name string, timeout time.Duration) (T, error) {
	var zero T
	sig, err := awaitWait(ctx, "AwaitSignal", name, timeout)
	switch {
	case err != nil:
		return zero, err
	case sig.TimedOut:
		return zero, fmt.Errorf("%w: signal %q, waited %s", ErrWaitTimedOut, name, timeout)
	}
	var v T
	if err := json.Unmarshal(sig.Payload, &v); err != nil {
		return zero, Permanent(fmt.Errorf("twice: signal %q: its payload %s does not decode into %T: %w",
			name, freetext.QuoteShort(string(sig.Payload)), zero, err))
	}
	return v, nil
}

// Sleep waits d, durably: the first run that reaches it parks the job for
// d and returns a *WaitError to return from the handler; the run after
// the timer fired (or after a signal of the same name cut the sleep
// short) gets nil. name tells this sleep apart from the job's other waits
// and shares their names: a sleep "cool-off" and a signal "cool-off" are
// one wait. A d of zero or less is refused (ErrInvalidInput).
func Sleep(ctx context.Context, name string, d time.Duration) error {
	_, err := awaitWait(ctx, "Sleep", name, d)
	return err
}

// awaitWait returns the resolution of the job's wait name, or the
// *WaitError that parks the job until it comes.
func awaitWait(ctx context.Context, fn, name string, timeout time.Duration) (*twicetype.Signal, error) {
	r := runFrom(ctx)
	if r == nil {
		return nil, fmt.Errorf("twice: %s %q: call it with a handler's context: %w", fn, name, ErrNotInHandler)
	}
	if err := checkWaitName(name); err != nil {
		return nil, Permanent(err)
	}
	if timeout <= 0 {
		return nil, Permanent(invalidf("twice: %s %q: the timeout is %s; give a positive one, or twice.NoTimeout", fn, name, timeout))
	}
	var exec twicestore.Executor = r.store
	if r.tx != nil {
		exec = r.tx
	}
	sig, err := exec.JobSignalGet(ctx, &twicestore.JobSignalGetParams{JobID: r.row.ID, Name: name})
	switch {
	case err == nil:
		return sig, nil
	case !errors.Is(err, twicestore.ErrNotFound):
		return nil, fmt.Errorf("twice: %s %q: read the wait: %w", fn, name, err)
	}
	w := &WaitError{Name: name}
	if timeout != NoTimeout {
		w.Until = time.Now().Add(timeout)
	}
	return nil, w
}

// checkWaitName refuses a wait's name that no driver can store, as bad
// input.
func checkWaitName(name string) error {
	if name == "" {
		return invalidf("twice: wait: a wait needs a name (the signal it waits for): name it with short text, such as \"approval\"")
	}
	if err := freetext.Check("wait name", name, MaxNameBytes); err != nil {
		return invalidf("twice: %v: name a wait with short text, such as \"approval\"", err)
	}
	return nil
}

// Decision is the payload of the dashboard's approve and reject buttons
// on a waiting job: await it as AwaitSignal[twice.Decision](ctx, name,
// timeout). By is the dashboard user who decided, Reason what they typed.
type Decision struct {
	Approved bool   `json:"approved"`
	By       string `json:"by"`
	Reason   string `json:"reason"`
}

// SignalParams is one signal for one job.
type SignalParams struct {
	// JobID is the job the signal is for.
	JobID int64
	// Name is the wait the signal resolves (AwaitSignal's name).
	Name string
	// Payload is what AwaitSignal returns, encoded as JSON: at most
	// Config.MaxArgsBytes, and, as args, with no key that looks like a
	// secret (a password, a token): signals are stored and shown as
	// plaintext. nil sends JSON null.
	Payload any
	// By names who sent it, for the record (user@host for the CLI); "api"
	// when empty.
	By string
}

// SignalResult says what a signal did.
type SignalResult struct {
	// JobID and Name are the job and the wait the signal was for.
	JobID int64
	Name  string
	// Duplicate reports that the wait had a resolution already (this
	// signal sent before, or its timeout): nothing changed. Existing is
	// that resolution.
	Duplicate bool
	Existing  *twicetype.Signal
	// Woke reports that the job was waiting for this signal and is now
	// available to run.
	Woke bool
}

// Signal resolves the wait p.Name of job p.JobID with p.Payload, once:
// a job waiting for it becomes available in the same write, a job that
// has not reached the wait yet finds it there when it does, and a second
// signal of the name (a sender's retry, a provider's duplicate webhook)
// changes nothing and reports Duplicate, even once the job has finished.
// A signal for a job that does not exist is refused with ErrJobNotFound,
// a new one for a finished job with ErrJobFinished; a name or payload that cannot be stored with
// ErrInvalidInput. None of them stores anything. The signal is stored
// whatever the job's kind awaits: a name it never awaits is kept, unread,
// until the job is deleted.
func (c *Client) Signal(ctx context.Context, p *SignalParams) (*SignalResult, error) {
	return c.signal(ctx, c.store, p)
}

// SignalTx is Signal in the caller's transaction: the signal and the
// job's wake-up commit with it, or neither does.
func (c *Client) SignalTx(ctx context.Context, tx any, p *SignalParams) (*SignalResult, error) {
	exec, err := c.adminExec("signal a job", tx)
	if err != nil {
		return nil, err
	}
	return c.signal(ctx, exec, p)
}

func (c *Client) signal(ctx context.Context, exec twicestore.Executor, p *SignalParams) (*SignalResult, error) {
	if p == nil {
		return nil, invalidf("twice: signal: the params are nil")
	}
	sp, err := c.signalParams(p)
	if err != nil {
		return nil, err
	}
	res, err := exec.JobSignal(ctx, sp)
	switch {
	case errors.Is(err, twicestore.ErrNotFound):
		return nil, fmt.Errorf("twice: signal %q for job %d: %w", p.Name, p.JobID, ErrJobNotFound)
	case errors.Is(err, twicestore.ErrJobFinished):
		return nil, fmt.Errorf("twice: signal %q for job %d: %w: nothing waits for it", p.Name, p.JobID, ErrJobFinished)
	case errors.Is(err, twicestore.ErrUnstorable):
		return nil, invalidf("twice: signal %q for job %d: %v", p.Name, p.JobID, err)
	case err != nil:
		return nil, fmt.Errorf("twice: signal %q for job %d: %w", p.Name, p.JobID, err)
	}
	if res.Woke {
		c.notify()
	}
	return &SignalResult{JobID: p.JobID, Name: p.Name, Duplicate: res.Existing != nil, Existing: res.Existing, Woke: res.Woke}, nil
}

// signalParams checks a signal as bad input before it reaches the store
// and encodes its payload under the args policy.
func (c *Client) signalParams(p *SignalParams) (*twicestore.JobSignalParams, error) {
	if p.JobID <= 0 {
		return nil, invalidf("twice: signal %q: give the id of the job it is for (JobID is %d)", p.Name, p.JobID)
	}
	if err := checkWaitName(p.Name); err != nil {
		return nil, err
	}
	by := byOr(p.By)
	if err := freetext.Check("sender", by, MaxNameBytes); err != nil {
		return nil, invalidf("twice: signal %q: %v", p.Name, err)
	}
	payload, err := json.Marshal(p.Payload)
	if err != nil {
		return nil, invalidf("twice: signal %q: encode its payload as JSON: %v", p.Name, err)
	}
	if err := CheckSignalPayload(p.Name, payload, c.cfg.MaxArgsBytes); err != nil {
		return nil, err
	}
	return &twicestore.JobSignalParams{JobID: p.JobID, Name: p.Name, Payload: payload, Sender: by, Now: c.now()}, nil
}

// CheckSignalPayload applies the payload policy to a signal's JSON
// payload, for tools that signal without a Go value (the CLI, HTTP): one
// JSON value of at most maxBytes once compacted (0 means
// MaxArgsBytesDefault), UTF-8, and, when it is an object, no key that
// looks like a secret. Errors wrap ErrInvalidInput.
func CheckSignalPayload(name string, raw []byte, maxBytes int) error {
	if maxBytes <= 0 {
		maxBytes = MaxArgsBytesDefault
	}
	if at := freetext.UnstorableAt(string(raw)); at >= 0 {
		return invalidf("twice: signal %q: its payload holds a NUL byte or bytes that are not UTF-8 (at byte %d): send UTF-8 JSON", name, at)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return invalidf("twice: signal %q: its payload is not JSON (%v): send one JSON value, such as '{\"approved\": true}'", name, err)
	}
	if compact.Len() > maxBytes {
		return invalidf("twice: signal %q: its payload is %d bytes, over the %d-byte limit: send an id, not the document",
			name, compact.Len(), maxBytes)
	}
	if bytes.HasPrefix(compact.Bytes(), []byte("{")) {
		members, err := objectMembers(compact.Bytes())
		if err != nil {
			return invalidf("twice: signal %q: its payload: %v", name, err)
		}
		for _, m := range members {
			if sm, ok := matchSensitive(nameWords(m.key)); ok {
				return invalidf("twice: signal %q: its payload's key %q looks like %s (%q): signals are stored and shown "+
					"as plaintext, so send an id and let the handler load the value", name, m.key, sm.what, sm.phrase)
			}
		}
	}
	return nil
}
