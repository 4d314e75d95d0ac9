package twice

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/twicejobs/twice/internal/freetext"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// MaxReceiptBytes caps a step's receipt, its result encoded as JSON: keep
// what a redelivery needs (a provider's charge id), not the document.
const MaxReceiptBytes = twicestore.MaxReceiptBytes

// MaxStepNameBytes caps a step's name.
const MaxStepNameBytes = 100

// stepRun is what the steps of one delivery share: the job, its store or
// transaction, the names used so far, and the output recorded. Each
// delivery gets its own, so two deliveries at once (Config.Redeliver)
// never share one.
type stepRun struct {
	store   twicestore.Store
	row     *twicetype.JobRow
	handler string
	// strategy is the kind's; a Transactional kind's handler runs in tx.
	strategy Strategy
	tx       twicestore.Tx
	// tracer, when set, gets a span per step.
	tracer Tracer
	// waitTokenKey signs the delivery's wait tokens (Config.WaitTokenKey).
	waitTokenKey []byte

	mu   sync.Mutex
	used map[string]Strategy
	// output is what RecordOutput recorded, written with the completion.
	output []byte
}

type runCtxKey struct{}

// stepTxKey carries a transactional step's transaction to its function.
type stepTxKey struct{}

func withRun(ctx context.Context, r *stepRun) context.Context {
	return context.WithValue(ctx, runCtxKey{}, r)
}

func runFrom(ctx context.Context) *stepRun {
	r, _ := ctx.Value(runCtxKey{}).(*stepRun)
	return r
}

// Step runs fn as the named step of the handler whose context ctx is, with
// its own marker and its own strategy, and returns its result. The result
// is stored as the step's receipt (JSON, at most MaxReceiptBytes): a
// redelivered job gets the receipt of a step that finished instead of
// running it again, and so resumes at its first unfinished step.
//
// The strategy is the step's bias, as for a kind:
//   - ClaimBefore claims the step first, runs fn, then stores the receipt.
//     A failure keeps the claim and fails the job permanently (a human
//     decides), unless fn returns NotApplied (or Snooze): the effect
//     certainly did not happen, the claim is released and the step runs
//     again on the retry. A redelivery that finds an unfinished claim of an
//     earlier delivery fails with ErrEffectUncertain.
//   - ClaimAfter runs fn and then claims the step with its receipt. A
//     crash in between runs fn again.
//   - Transactional runs fn in a transaction (StepTx) with the claim and
//     the receipt: in the job's own transaction for a Transactional kind,
//     in one of its own otherwise.
//
// Every step write is fenced by the job's lease epoch: a delivery that
// lost its lease cannot claim or finish a step (the error wraps
// ErrLeaseLost).
//
// A name stands for one effect of the message: a second Step of the same
// name in one delivery is refused (ErrInvalidInput, failing the job
// permanently), as it would find the first one's receipt; in a loop, name
// each step after its item (twice.Step(ctx, "charge:"+item.ID, …)). A name
// is UTF-8 text of at most MaxStepNameBytes without NUL bytes, and a result
// must encode to UTF-8 JSON; others are refused with ErrInvalidInput. A
// name keeps its strategy across deliveries. A Transactional kind's steps
// must be Transactional (its handler already runs in one transaction):
// give the kind None or ClaimAfter and each step its own bias.
func Step[R any](ctx context.Context, name string, s Strategy, fn func(ctx context.Context) (R, error)) (R, error) {
	var zero R
	r := runFrom(ctx)
	if r == nil {
		return zero, fmt.Errorf("twice: step %q: twice.Step must be called with a handler's context", name)
	}
	if err := r.use(name, s); err != nil {
		return zero, err
	}
	var result R
	ran := false
	ctx, end := r.traceStep(ctx, name, s)
	receipt, err := r.step(ctx, name, s, func(ctx context.Context) ([]byte, error) {
		v, err := fn(ctx)
		if err != nil {
			return nil, err
		}
		result, ran = v, true
		return encodeReceipt(name, v)
	})
	switch {
	case err != nil:
		end(stepStatusFailed, err)
		return zero, err
	case ran:
		end(stepStatusRan, nil)
		return result, nil
	}
	end(stepStatusReceipt, nil)
	if err := json.Unmarshal(receipt, &result); err != nil {
		return zero, Permanent(fmt.Errorf("twice: step %q: its stored receipt %s does not decode into %T "+
			"(did the step's result type change?): %w", name, receipt, zero, err))
	}
	return result, nil
}

// encodeReceipt encodes a step's result, within MaxReceiptBytes and as
// valid UTF-8, so every driver stores it.
func encodeReceipt(name string, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("twice: step %q: encode its result as JSON: %w", name, err)
	}
	if len(b) > MaxReceiptBytes {
		return nil, fmt.Errorf("twice: step %q: its result is %d bytes as JSON, over twice.MaxReceiptBytes (%d): "+
			"return a reference (an id) instead of the document: %w", name, len(b), MaxReceiptBytes, twicestore.ErrReceiptTooLarge)
	}
	if at := freetext.UnstorableAt(string(b)); at >= 0 {
		// Only a json.RawMessage or a MarshalJSON method can produce it:
		// json.Marshal escapes every string.
		return nil, invalidf("twice: step %q: its result as JSON is not valid UTF-8 (byte 0x%02x at offset %d), "+
			"so it cannot be stored as its receipt; return binary data as a []byte (base64)", name, b[at], at)
	}
	return b, nil
}

// use records name as used with s in this delivery, refusing a name used
// already, a name no driver can store, and a strategy the kind cannot run.
func (r *stepRun) use(name string, s Strategy) error {
	if err := checkStepName(name); err != nil {
		return err
	}
	switch {
	case s != ClaimBefore && s != ClaimAfter && s != Transactional:
		return fmt.Errorf("twice: step %q: strategy %s is not for steps: use ClaimBefore, ClaimAfter or Transactional "+
			"(a step with nothing to remember needs no twice.Step)", name, s)
	case r.strategy == Transactional && s != Transactional:
		return fmt.Errorf("twice: step %q: kind %q is Transactional, so its handler runs in one transaction and its steps "+
			"must be Transactional too; register the kind with strategy None and give each step its own", name, r.row.Kind)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if was, ok := r.used[name]; ok {
		// A name stands for one effect of the message: a second step of
		// the same name would find the first one's receipt and silently
		// skip its own function (a loop of charges would charge once).
		if was != s {
			return Permanent(invalidf("twice: step %q is used with strategy %s and %s in one handler: "+
				"give each step one strategy, or another name", name, was, s))
		}
		return Permanent(invalidf("twice: step %q is used twice in one delivery: a step's name stands for one effect, "+
			"so the second would be skipped; in a loop, name each step after its item, such as \"charge:\"+item.ID", name))
	}
	if r.used == nil {
		r.used = map[string]Strategy{}
	}
	r.used[name] = s
	return nil
}

// checkStepName refuses a step name that is empty, too long, or that no
// driver can store (a NUL byte, bytes that are not UTF-8), before it
// reaches the database.
func checkStepName(name string) error {
	switch {
	case name == "":
		return invalidf("twice: a step needs a name: pass a short constant such as \"charge\"")
	case len(name) > MaxStepNameBytes:
		return invalidf("twice: step name %.20q... is over %d bytes", name, MaxStepNameBytes)
	}
	if at := freetext.UnstorableAt(name); at >= 0 {
		return invalidf("twice: step name %q holds a NUL byte or bytes that are not UTF-8 (at byte %d), "+
			"which cannot be stored: name steps with text, such as \"charge\" or \"charge:\"+item.ID", name, at)
	}
	return nil
}

func (r *stepRun) params(name string, s Strategy) *twicestore.StepParams {
	return &twicestore.StepParams{Handler: r.handler, Key: r.row.Key, Step: name, Strategy: s.String(),
		JobID: r.row.ID, Epoch: r.row.Epoch}
}

// step runs one step under strategy s and returns its receipt.
func (r *stepRun) step(ctx context.Context, name string, s Strategy, fn func(context.Context) ([]byte, error)) ([]byte, error) {
	switch s {
	case ClaimBefore:
		return r.claimBefore(ctx, name, fn)
	case ClaimAfter:
		return r.claimAfter(ctx, name, fn)
	default:
		return r.transactional(ctx, name, fn)
	}
}

// stepErr wraps a store error of a step, telling a lost lease apart.
func stepErr(name, what string, err error) error {
	if errors.Is(err, twicestore.ErrFenced) {
		return fmt.Errorf("%w: step %q: %s: %w", ErrLeaseLost, name, what, err)
	}
	return fmt.Errorf("twice: step %q: %s: %w", name, what, err)
}

// found turns an existing step into its receipt, or the error a step
// claimed but unfinished is.
func (r *stepRun) found(name string, s Strategy, ex *twicetype.Step) ([]byte, error) {
	if ex.Strategy != "" && ex.Strategy != s.String() {
		return nil, Permanent(fmt.Errorf("twice: step %q of handler %q, key %q ran with strategy %s and is now used with %s: "+
			"a step keeps its strategy; give the new one another name", name, r.handler, r.row.Key, ex.Strategy, s))
	}
	if ex.Done() {
		return ex.Receipt, nil
	}
	if ex.JobID == r.row.ID && ex.Epoch < r.row.Epoch {
		return nil, Permanent(fmt.Errorf("%w: step %q of handler %q, key %q was claimed in lease epoch %d of this job "+
			"(this is epoch %d) and never finished; check whether its effect happened (ask the provider about "+
			"twice.EffectKey %q), record what you found with Client.StepSettle(ctx, %d, %q, receipt or nil) and "+
			"retry the job, or discard it",
			ErrEffectUncertain, name, r.handler, r.row.Key, ex.Epoch, r.row.Epoch,
			effectKey(r.handler, r.row.Key, name), r.row.ID, name))
	}
	// Another delivery holds it right now: this job's twin, or another
	// job with the same key. Retry later; by then it has finished.
	return nil, fmt.Errorf("twice: step %q of key %q is being run by job %d (epoch %d); this delivery retries later",
		name, r.row.Key, ex.JobID, ex.Epoch)
}

func (r *stepRun) claimBefore(ctx context.Context, name string, fn func(context.Context) ([]byte, error)) ([]byte, error) {
	p := r.params(name, ClaimBefore)
	claim, err := r.store.StepClaim(ctx, p)
	if err != nil {
		return nil, stepErr(name, "claim", err)
	}
	if !claim.Claimed {
		return r.found(name, ClaimBefore, claim.Existing)
	}
	receipt, err := fn(ctx)
	var (
		notApplied *NotAppliedError
		snooze     *SnoozeError
		wait       *WaitError
	)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), outcomeWriteTimeout)
	defer cancel()
	switch {
	case err == nil:
		p.Receipt = receipt
		if err := r.store.StepComplete(wctx, p); err != nil {
			return nil, stepErr(name, "store its receipt (its effect happened; the claim stays unfinished)", err)
		}
		return receipt, nil
	case errors.As(err, &notApplied), errors.As(err, &snooze), errors.As(err, &wait):
		if rerr := r.store.StepRelease(wctx, p); rerr != nil {
			return nil, Permanent(fmt.Errorf("twice: step %q: release its claim after %w: %w", name, err, rerr))
		}
		return nil, err
	}
	return nil, Permanent(fmt.Errorf("twice: step %q (claim-before) failed: %w; its effect may have happened, so its claim "+
		"is kept and the job needs a human (return twice.NotApplied(err) when it certainly did not)", name, err))
}

func (r *stepRun) claimAfter(ctx context.Context, name string, fn func(context.Context) ([]byte, error)) ([]byte, error) {
	p := r.params(name, ClaimAfter)
	ex, err := r.store.StepGet(ctx, p)
	switch {
	case err == nil:
		return r.found(name, ClaimAfter, ex)
	case !errors.Is(err, twicestore.ErrNotFound):
		return nil, stepErr(name, "peek", err)
	}
	receipt, err := fn(ctx)
	if err != nil {
		return nil, err // never claim after an error: the retry must run it again
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), outcomeWriteTimeout)
	defer cancel()
	p.Done, p.Receipt = true, receipt
	if _, err := r.store.StepClaim(wctx, p); err != nil {
		return nil, stepErr(name, "claim after its effect (the next delivery runs it again)", err)
	}
	return receipt, nil // a twin's claim in between: both ran, as ClaimAfter allows
}

func (r *stepRun) transactional(ctx context.Context, name string, fn func(context.Context) ([]byte, error)) ([]byte, error) {
	tx := r.tx
	if tx == nil {
		own, err := r.store.Begin(ctx)
		if err != nil {
			return nil, stepErr(name, "begin its transaction", err)
		}
		defer func() { _ = own.Rollback(context.WithoutCancel(ctx)) }() // after Commit, a no-op
		tx = own
	}
	p := r.params(name, Transactional)
	// The claim's fence holds no lock: the transaction goes on to run fn,
	// and a held job row would stop the job's heartbeats. The receipt's
	// write locks it until the step's own commit, which follows at once;
	// in the job's transaction, the job's epoch-guarded completion is the
	// fence at commit, so nothing is held there.
	p.FenceWithoutLock = true
	claim, err := tx.StepClaim(ctx, p)
	if err != nil {
		return nil, stepErr(name, "claim", err)
	}
	if !claim.Claimed {
		return r.found(name, Transactional, claim.Existing)
	}
	receipt, err := fn(context.WithValue(ctx, stepTxKey{}, tx))
	if err != nil {
		return nil, err
	}
	p.Receipt, p.FenceWithoutLock = receipt, tx == r.tx
	if err := tx.StepComplete(ctx, p); err != nil {
		return nil, stepErr(name, "store its receipt", err)
	}
	if tx != r.tx {
		if err := tx.Commit(ctx); err != nil {
			return nil, stepErr(name, "commit", err)
		}
	}
	return receipt, nil
}

// StepTx returns the transaction of the Transactional step whose function
// ctx belongs to, as the driver's own type (a *sql.Tx for SQLite), or nil
// outside one. The step writes its effect in it; twice commits it with the
// step's claim and receipt.
func StepTx(ctx context.Context) any {
	tx, _ := ctx.Value(stepTxKey{}).(twicestore.Tx)
	if tx == nil {
		return nil
	}
	return tx.Unwrap()
}

// StepSQLTx is StepTx as a *sql.Tx, or nil.
func StepSQLTx(ctx context.Context) *sql.Tx {
	tx, _ := StepTx(ctx).(*sql.Tx)
	return tx
}

// EffectKey returns a stable key for the effect named name of the job
// whose handler context ctx is: the same for every delivery of the
// message (handler, message key and name), different for every other. Send
// it as a provider's Idempotency-Key, so a step the provider already
// applied is not applied twice. It is "" outside a handler.
func EffectKey(ctx context.Context, name string) string {
	r := runFrom(ctx)
	if r == nil {
		return ""
	}
	return effectKey(r.handler, r.row.Key, name)
}

// EffectKey returns a stable key for the job's effect named name: the
// same on every delivery of the message, different for every other
// message and name. Send it as a provider's Idempotency-Key. It is what
// twice.EffectKey(ctx, name) returns with the handler's context.
func (j *Job[T]) EffectKey(name string) string {
	if j.steps == nil {
		return ""
	}
	return effectKey(j.steps.handler, j.Key, name)
}

func effectKey(handler, key, name string) string {
	h := sha256.New()
	for _, s := range []string{handler, key, name} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return "twice-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// StepSettle settles the unfinished claim of step name of job id, the one a
// dead letter wrapping ErrEffectUncertain asks a person to check: pass the
// step's result (what a redelivery should get back, the provider's charge
// id, say) when its effect happened, or nil when it did not; then retry the
// job (JobRetry), which resumes after the step or runs it again. The
// handler name is the kind's HandlerName when this client registers the
// kind, the one the kind catalog publishes otherwise. An error wraps twicestore.ErrNotFound when the
// step has no unfinished claim, and ErrJobRunning, settling nothing, while
// the job runs (its delivery may be in the effect right now); a name or
// receipt that is not UTF-8 text is refused with ErrInvalidInput.
func (c *Client) StepSettle(ctx context.Context, id int64, name string, receipt any) error {
	if err := checkStepName(name); err != nil {
		return err
	}
	row, err := c.JobGet(ctx, id)
	if err != nil {
		return err
	}
	handler, err := c.handlerOf(ctx, row.Kind)
	if err != nil {
		return fmt.Errorf("twice: settle step %q of job %d: %w", name, id, err)
	}
	p := &twicestore.StepParams{Handler: handler, Key: row.Key, Step: name}
	if receipt != nil {
		if p.Receipt, err = encodeReceipt(name, receipt); err != nil {
			return err
		}
	}
	err = c.store.StepSettle(ctx, p)
	switch {
	case errors.Is(err, twicestore.ErrStepRunning):
		return fmt.Errorf("twice: settle step %q of job %d: %w: its delivery may be running the step's effect now; "+
			"settle the step once the job is dead, or cancel the job and wait for it to stop (%w)", name, id, ErrJobRunning, err)
	case err != nil:
		return fmt.Errorf("twice: settle step %q of job %d: %w", name, id, err)
	}
	return nil
}
