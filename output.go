package twice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twicejobs/twice/internal/freetext"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// MaxOutputBytes caps a job's output, encoded as JSON.
const MaxOutputBytes = twicestore.MaxOutputBytes

// ErrOutputTooLarge: RecordOutput's value is over MaxOutputBytes as JSON.
var ErrOutputTooLarge = errors.New("twice: job output is over twice.MaxOutputBytes (64 KiB) as JSON; record a reference (an id, a URL) instead")

// ErrJobNotCompleted is returned by JobResult and Wait for a job with no
// result (unfinished, dead, cancelled); the *JobOutput says which.
var ErrJobNotCompleted = errors.New("twice: job did not complete")

// RecordOutput records v, encoded as JSON (at most MaxOutputBytes), as the
// output of the job whose handler context ctx is. It is stored with the
// job's completion, in the same write, and only if the job completes: a
// failed attempt's output is dropped. The last call wins. Read it with
// Client.JobResult or Client.Wait. JSON that is not valid UTF-8 (only a
// json.RawMessage or a MarshalJSON method can produce it) is refused with
// ErrInvalidInput, not cleaned: output is data a caller reads back. Encode
// binary data as a []byte field (base64).
func RecordOutput(ctx context.Context, v any) error {
	r := runFrom(ctx)
	if r == nil {
		return errors.New("twice: RecordOutput must be called with a handler's context")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("twice: record output: encode it as JSON: %w", err)
	}
	if len(b) > MaxOutputBytes {
		return fmt.Errorf("%w: it is %d bytes", ErrOutputTooLarge, len(b))
	}
	if at := freetext.UnstorableAt(string(b)); at >= 0 {
		return fmt.Errorf("twice: record output: its JSON is not valid UTF-8 (byte 0x%02x at offset %d), "+
			"so it cannot be stored; encode binary data as a []byte field (base64): %w", b[at], at, ErrInvalidInput)
	}
	r.mu.Lock()
	r.output = b
	r.mu.Unlock()
	return nil
}

// recorded returns the output RecordOutput recorded, or nil.
func (r *stepRun) recorded() []byte {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.output
}

// JobOutput is a job's state and, once it completed, its output: what
// Client.JobResult and Client.Wait return.
type JobOutput struct {
	ID    int64
	State twicetype.JobState
	// Output is what the handler recorded with RecordOutput, as JSON; nil
	// when it recorded nothing or the job did not complete.
	Output json.RawMessage
	// Error is the last attempt's error, for a job that did not complete.
	Error string
	// Note says why the job finished as it did (a no-op's reason, a
	// cancel's).
	Note string
}

// Decode decodes the output into v.
func (r *JobOutput) Decode(v any) error {
	if r.Output == nil {
		return fmt.Errorf("twice: job %d recorded no output", r.ID)
	}
	return json.Unmarshal(r.Output, v)
}

// JobResult returns job id's state and output. The error is nil only for a
// completed job; otherwise it wraps ErrJobNotCompleted (with the result
// saying the state) or twicestore.ErrNotFound.
func (c *Client) JobResult(ctx context.Context, id int64) (*JobOutput, error) {
	out, err := c.store.JobOutput(ctx, &twicestore.JobGetParams{ID: id})
	if err != nil {
		return nil, fmt.Errorf("twice: job result: %w", err)
	}
	return jobOutput(id, out)
}

func jobOutput(id int64, out *twicestore.JobOutputResult) (*JobOutput, error) {
	res := &JobOutput{ID: id, State: out.State, Output: out.Output, Note: out.Note}
	switch {
	case out.State == twicetype.JobStateCompleted:
		return res, nil
	case out.State.Finished():
		res.Error = out.Error
		msg := fmt.Sprintf("job %d is %s", id, out.State)
		if out.Error != "" {
			msg += ": its last error: " + out.Error
		} else if out.Note != "" {
			msg += ": " + out.Note
		}
		return res, fmt.Errorf("%w: %s", ErrJobNotCompleted, msg)
	}
	return res, fmt.Errorf("%w: job %d is %s, not finished yet: Wait for it", ErrJobNotCompleted, id, out.State)
}

// Wait blocks until job id finishes, or ctx ends, and returns what JobResult
// returns then: the output of a completed job, or an error wrapping
// ErrJobNotCompleted for a dead or cancelled one. PostgreSQL wakes it with
// a notification (a hint: the state is always read from the store); on
// SQLite it polls, from every 5 ms backing off to 250 ms. A read that fails
// (the database failing over) is retried until ctx ends; only a job that
// does not exist ends the wait early (twicestore.ErrNotFound). Whatever the
// error, the *JobOutput is not nil: its ID names the job and its State is
// the last one read (empty when none was).
func (c *Client) Wait(ctx context.Context, id int64) (*JobOutput, error) {
	if l, ok := twicestore.As[twicestore.FinishListener](c.store); ok {
		return c.waits.wait(ctx, l, c.store, id)
	}
	return pollWait(ctx, c.store, id)
}

// EnqueueAndWait enqueues args and waits for the job to finish, as Wait
// does; for a duplicate (a unique key an unfinished job holds), it waits for
// that job. Its handler records the result with RecordOutput. Once the job
// is enqueued the *JobOutput is not nil, whatever the error, so a caller
// whose ctx ended can Wait for that job rather than enqueue a second one.
func (c *Client) EnqueueAndWait(ctx context.Context, args Args, opts *EnqueueOpts) (*JobOutput, error) {
	res, err := c.Enqueue(ctx, args, opts)
	if err != nil {
		return nil, err
	}
	return c.Wait(ctx, res.Job.ID)
}

// Poll intervals of Wait without notifications.
const (
	waitPollMin = 5 * time.Millisecond
	waitPollMax = 250 * time.Millisecond
	// waitRecheck is how often a notified Wait reads the state anyway, in
	// case a notification was lost.
	waitRecheck = 2 * time.Second
	// waitLinger keeps the finish listener after its last waiter left, so
	// a stream of waits does not connect and LISTEN for each.
	waitLinger = 10 * time.Second
	// The pause before Wait reads again after a failed read doubles from
	// waitRetryMin to waitRetryMax: a restart or a failover takes seconds
	// to tens of seconds, and a caller that gave up on it would enqueue
	// the job again.
	waitRetryMin = 100 * time.Millisecond
	waitRetryMax = 2 * time.Second
)

// waitReads is what one Wait learned from its reads of a job: the last
// state read and, when the last read failed, its error and the pause
// before the next.
type waitReads struct {
	id    int64
	state twicetype.JobState
	err   error
	retry time.Duration
}

// read reads the job with read, and reports done with Wait's answer once
// the job finished or does not exist. A failed read is kept in r.err, to
// be tried again after r.retry.
func (r *waitReads) read(ctx context.Context, read func(context.Context, *twicestore.JobGetParams) (*twicestore.JobOutputResult, error)) (out *JobOutput, done bool, err error) {
	res, err := read(ctx, &twicestore.JobGetParams{ID: r.id})
	switch {
	case errors.Is(err, twicestore.ErrNotFound):
		return r.output(), true, fmt.Errorf("twice: wait for job %d: %w", r.id, err)
	case err != nil && ctx.Err() != nil:
		out, err := r.ended(ctx)
		return out, true, err
	case err != nil:
		r.err, r.retry = err, min(max(2*r.retry, waitRetryMin), waitRetryMax)
		return nil, false, nil
	}
	r.state, r.err, r.retry = res.State, nil, 0
	if res.State.Finished() {
		out, err := jobOutput(r.id, res)
		return out, true, err
	}
	return nil, false, nil
}

// ended is Wait's answer when ctx ended first: ctx's cause, and the last
// read's failure if it failed, which is likely why the wait was long.
func (r *waitReads) ended(ctx context.Context) (*JobOutput, error) {
	err := fmt.Errorf("twice: wait for job %d: %w", r.id, context.Cause(ctx))
	if r.err != nil {
		err = fmt.Errorf("%w (its last read failed: %w)", err, r.err)
	}
	return r.output(), err
}

// output names the job, in the last state read, for an answer that is not
// the job's result.
func (r *waitReads) output() *JobOutput { return &JobOutput{ID: r.id, State: r.state} }

func pollWait(ctx context.Context, ex twicestore.Executor, id int64) (*JobOutput, error) {
	r := &waitReads{id: id}
	interval := waitPollMin
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return r.ended(ctx)
		case <-t.C:
		}
		if out, done, err := r.read(ctx, ex.JobOutput); done {
			return out, err
		}
		if r.err != nil {
			t.Reset(r.retry)
			continue
		}
		t.Reset(interval)
		interval = min(2*interval, waitPollMax)
	}
}

// waitHub shares one finish listener among a client's waiters. The
// listener runs while someone waits and lingers a while after; Stop ends
// it.
type waitHub struct {
	mu        sync.Mutex
	waiters   map[int64]map[chan struct{}]struct{}
	n         int
	running   bool
	closed    bool
	cancel    context.CancelFunc
	done      chan struct{}
	listening chan struct{} // closed once the listener first listens
	linger    *time.Timer
}

// wait waits for id's finish with notifications from l.
func (h *waitHub) wait(ctx context.Context, l twicestore.FinishListener, store twicestore.Store, id int64) (*JobOutput, error) {
	ch, listening, ok := h.add(l, id)
	if !ok {
		return pollWait(ctx, store, id)
	}
	defer h.remove(id, ch)
	r := &waitReads{id: id}
	// Read the state only once the listener listens, so a finish right
	// after the read is notified; a listener slow to connect is not
	// waited for long.
	t := time.NewTimer(waitRecheck)
	defer t.Stop()
	select {
	case <-listening:
	case <-t.C:
	case <-ctx.Done():
		return r.ended(ctx)
	}
	read := l.JobAwait // marks the job, so its finish is notified
	for {
		if out, done, err := r.read(ctx, read); done {
			return out, err
		}
		if r.err != nil { // read again, JobAwait until it marked the job
			t.Reset(r.retry)
			select {
			case <-t.C:
			case <-ctx.Done():
				return r.ended(ctx)
			}
			continue
		}
		read = store.JobOutput
		t.Reset(waitRecheck)
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			return r.ended(ctx)
		}
	}
}

// add registers a waiter for id, starting the listener if needed. It
// reports false once the hub is closed.
func (h *waitHub) add(l twicestore.FinishListener, id int64) (chan struct{}, <-chan struct{}, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, nil, false
	}
	if h.linger != nil {
		h.linger.Stop()
		h.linger = nil
	}
	if !h.running {
		ctx, cancel := context.WithCancel(context.Background())
		done, listening := make(chan struct{}), make(chan struct{})
		h.running, h.cancel, h.done, h.listening = true, cancel, done, listening
		var once sync.Once
		go func() {
			defer close(done)
			_ = l.ListenFinished(ctx, h.notify, func() {
				once.Do(func() { close(listening) })
				h.wakeAll() // notifications may have been missed while not listening
			})
		}()
	}
	if h.waiters == nil {
		h.waiters = map[int64]map[chan struct{}]struct{}{}
	}
	ch := make(chan struct{}, 1)
	if h.waiters[id] == nil {
		h.waiters[id] = map[chan struct{}]struct{}{}
	}
	h.waiters[id][ch] = struct{}{}
	h.n++
	return ch, h.listening, true
}

func (h *waitHub) remove(id int64, ch chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.waiters[id], ch)
	if len(h.waiters[id]) == 0 {
		delete(h.waiters, id)
	}
	h.n--
	if h.n == 0 && h.running && !h.closed {
		h.linger = time.AfterFunc(waitLinger, h.idle)
	}
}

// idle stops the listener when no one waited for waitLinger.
func (h *waitHub) idle() {
	h.mu.Lock()
	if h.n > 0 || !h.running {
		h.mu.Unlock()
		return
	}
	h.stopLocked()
}

// stopLocked stops the listener and unlocks h, then waits for it to end.
func (h *waitHub) stopLocked() {
	h.running = false
	cancel, done := h.cancel, h.done
	if h.linger != nil {
		h.linger.Stop()
		h.linger = nil
	}
	h.mu.Unlock()
	cancel()
	<-done
}

// close stops the listener for good; later waits poll.
func (h *waitHub) close() {
	h.mu.Lock()
	h.closed = true
	if !h.running {
		h.mu.Unlock()
		return
	}
	h.stopLocked()
}

func (h *waitHub) notify(id int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.waiters[id] {
		wake(ch)
	}
}

func (h *waitHub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, chs := range h.waiters {
		for ch := range chs {
			wake(ch)
		}
	}
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
