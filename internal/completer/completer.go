// Package completer writes job outcomes to the store in batches: one
// JobFinish call carries every outcome that arrived while the previous one
// was being written, so a busy worker pays one round trip for many jobs and
// an idle one pays no extra latency.
package completer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twicejobs/twice/internal/freetext"
	"github.com/twicejobs/twice/internal/logattr"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// MaxBatchDefault is the most outcomes written in one call.
const MaxBatchDefault = 1000

// writeTimeout bounds one batch write; outcomes are written even during
// shutdown, so they run on a context that is not the caller's.
const writeTimeout = 30 * time.Second

// The wait before retrying a failed write doubles from retryFirst up to
// retryMax. An outcome is retried until its job's lease would expire (a
// PostgreSQL failover takes tens of seconds, and an outcome given up
// during it makes its job run again), or, given no lease, retryTries
// times in all.
const (
	retryFirst = 200 * time.Millisecond
	retryMax   = 2 * time.Second
	retryTries = 4
)

// Done is told whether an outcome was applied (false: the lease was lost)
// or could not be written at all (err).
type Done func(applied bool, err error)

type item struct {
	outcome    *twicestore.JobOutcome
	leaseUntil func() time.Time // nil: no lease known
	done       Done
}

// Completer batches outcomes. Add blocks when MaxBatch outcomes are already
// waiting: back-pressure instead of an unbounded buffer.
type Completer struct {
	exec     twicestore.Executor
	logger   *slog.Logger
	maxBatch int
	in       chan item
	wg       sync.WaitGroup
	// ctx, given to Start, aborts the completer when cancelled: see Start.
	ctx context.Context
	// mu guards closed: Add holds it shared while sending, so Stop never
	// closes the channel under a sender.
	mu     sync.RWMutex
	closed bool

	// OnInserted, when set before Start, is called after a write that
	// inserted jobs (JobFinishResult.Inserted), so the node fetches them
	// without waiting for its poll.
	OnInserted func()
}

// New returns a completer writing through exec.
func New(exec twicestore.Executor, logger *slog.Logger, maxBatch int) *Completer {
	if maxBatch <= 0 {
		maxBatch = MaxBatchDefault
	}
	return &Completer{
		exec:     exec,
		logger:   logger.With(logattr.Component, "completer"),
		maxBatch: maxBatch,
		in:       make(chan item, maxBatch),
	}
}

// Start runs the write loop until Stop. Cancelling ctx aborts it: the
// write in flight and the wait before a retry end at once, the outcomes not
// written yet are reported to their Done with ctx's error, and Add queues
// nothing more. Stop still has to be called.
func (c *Completer) Start(ctx context.Context) {
	c.ctx = ctx
	c.wg.Add(1)
	go c.loop()
}

// Add queues an outcome; done is called from the write loop once it is
// written, or given up. An outcome the store refuses as unstorable is
// replaced, in place, by a dead-letter that says so (see fallback) before
// done is called, so done reads what was written. leaseUntil tells when the job's lease ends (it may
// move while the outcome waits, as a heartbeat extends it): a failed write
// is retried until then. A nil leaseUntil gives the outcome retryTries
// tries. Add blocks while the buffer is full. After Stop, or once the
// completer is aborted, it queues nothing and returns false: a handler
// that outlived the shutdown leaves its job to the lease.
func (c *Completer) Add(o *twicestore.JobOutcome, leaseUntil func() time.Time, done Done) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed || c.ctx.Err() != nil {
		return false
	}
	select {
	case c.in <- item{outcome: o, leaseUntil: leaseUntil, done: done}:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// Stop writes what is queued and ends the loop.
func (c *Completer) Stop() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.in)
	}
	c.mu.Unlock()
	c.wg.Wait()
}

func (c *Completer) loop() {
	defer c.wg.Done()
	batch := make([]item, 0, c.maxBatch)
	for first := range c.in {
		batch = append(batch[:0], first)
	drain:
		for len(batch) < c.maxBatch {
			select {
			case it, ok := <-c.in:
				if !ok {
					break drain
				}
				batch = append(batch, it)
			default:
				break drain
			}
		}
		c.write(batch)
	}
}

// write records one batch. A failed write is retried, with a growing wait,
// for the outcomes that can still be applied: an outcome that is never
// written is not lost (the lease expires and the job runs again), but it
// costs a duplicate delivery, so it is worth retrying as long as the lease
// holds. Each outcome given up is told the last error.
//
// A write the store refuses as unstorable (twicestore.ErrUnstorable) is
// never retried as it is: it would fail the same way for ever, and every
// outcome queued behind it would wait. The batch is halved until the
// outcomes the store refuses stand alone, so the others are written at
// once (a few more round trips, only when a write fails), and each one
// refused alone is replaced by its fallback (see fallback).
func (c *Completer) write(batch []item) {
	res, batch, err := c.writeRetrying(batch)
	switch {
	case len(batch) == 0:
		return // each given up
	case errors.Is(err, twicestore.ErrUnstorable) && len(batch) > 1:
		half := len(batch) / 2
		c.write(batch[:half])
		c.write(batch[half:])
		return
	case errors.Is(err, twicestore.ErrUnstorable):
		c.writeFallback(batch[0], err)
		return
	}
	if err == nil && res.Inserted && c.OnInserted != nil {
		c.OnInserted()
	}
	for i, it := range batch {
		if err != nil {
			it.done(false, err)
			continue
		}
		it.done(res.Applied[i], nil)
	}
}

// writeRetrying writes batch, retrying a failure other than an
// unstorable outcome while giveUp keeps outcomes to retry, and returns the
// outcomes still in the batch with the last answer.
func (c *Completer) writeRetrying(batch []item) (*twicestore.JobFinishResult, []item, error) {
	var (
		res  *twicestore.JobFinishResult
		err  error
		wait = retryFirst
	)
	for try := 0; ; try++ {
		if try > 0 {
			batch = c.giveUp(batch, try, wait, err)
			if len(batch) == 0 {
				return nil, nil, err
			}
			if !c.pause(wait) {
				return nil, batch, err // aborted: err is the last failure
			}
			wait = min(2*wait, retryMax)
		}
		if c.ctx.Err() != nil {
			return nil, batch, c.ctx.Err()
		}
		outcomes := make([]*twicestore.JobOutcome, len(batch))
		for i, it := range batch {
			outcomes[i] = it.outcome
		}
		ctx, cancel := context.WithTimeout(c.ctx, writeTimeout)
		res, err = c.exec.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: outcomes})
		cancel()
		if err == nil || errors.Is(err, twicestore.ErrUnstorable) {
			return res, batch, err
		}
		if c.ctx.Err() == nil {
			c.logger.Warn("writing job outcomes failed; retrying while their leases hold", logattr.Err, err,
				"jobs", len(batch), "try", try+1)
		}
	}
}

// maxFallbackText caps the error text of a fallback outcome.
const maxFallbackText = 4 << 10

// fallback is the outcome written in place of o when the store refuses o
// as unstorable: the job is dead-lettered, with an error saying what
// happened, for a person to look at. Not retried: o may record an effect
// that happened (a completion), and running the job again would repeat it;
// not left running either: its lease would be extended while the outcome
// waited, for ever. The marker o claims is kept, since the effect it
// stands for happened (withMarker false drops it, in case it was what the
// store refused); output, note and continuations are dropped, as any of
// them may be what it refused. The attempt number is o's error's, or 0
// when o recorded none (a completion).
func fallback(o *twicestore.JobOutcome, err error, withMarker bool) *twicestore.JobOutcome {
	now := time.Now()
	attempt := 0
	if o.Error != nil {
		attempt = o.Error.Attempt
	}
	fb := &twicestore.JobOutcome{ID: o.ID, Epoch: o.Epoch, State: twicetype.JobStateDead, FinishedAt: now,
		Error: &twicetype.AttemptError{Attempt: attempt, At: now, Error: freetext.Clean(fmt.Sprintf(
			"twice: the outcome of this attempt (%s) could not be stored, so the job was dead-lettered instead; "+
				"check what the handler did, then retry or discard the job: %v", o.State, err), maxFallbackText)}}
	if withMarker {
		fb.Marker = o.Marker
	}
	return fb
}

// writeFallback writes the fallback of an outcome the store refused as
// unstorable, replacing the outcome in place so its done reads what was
// written. A fallback refused too (its marker, say) is tried without the
// marker; one refused again is given up, and its job runs again once its
// lease expires.
func (c *Completer) writeFallback(it item, err error) {
	c.logger.Error("the store cannot store a job's outcome; dead-lettering the job instead",
		logattr.JobID, it.outcome.ID, "state", it.outcome.State, logattr.Err, err)
	for _, withMarker := range []bool{true, false} {
		if withMarker && it.outcome.Marker == nil {
			continue
		}
		fb := fallback(it.outcome, err, withMarker)
		res, kept, ferr := c.writeRetrying([]item{{outcome: fb, leaseUntil: it.leaseUntil, done: it.done}})
		switch {
		case len(kept) == 0:
			return // given up, and told so
		case ferr == nil:
			*it.outcome = *fb
			it.done(res.Applied[0], nil)
			return
		case !errors.Is(ferr, twicestore.ErrUnstorable):
			it.done(false, ferr)
			return
		}
		err = ferr
	}
	it.done(false, err)
}

// giveUp tells the outcomes of batch that cannot be retried after wait,
// the try-th, that their write failed with err, and returns the rest: an
// outcome whose lease would have expired by then (the rescuer may run the
// job again meanwhile), or given no lease and tried retryTries times.
func (c *Completer) giveUp(batch []item, try int, wait time.Duration, err error) []item {
	next := time.Now().Add(wait)
	kept := batch[:0]
	for _, it := range batch {
		if it.leaseUntil == nil && try < retryTries || it.leaseUntil != nil && it.leaseUntil().After(next) {
			kept = append(kept, it)
			continue
		}
		it.done(false, err)
	}
	return kept
}

// pause waits d before a retry, and reports false instead when the
// completer is aborted meanwhile.
func (c *Completer) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.ctx.Done():
		return false
	}
}
