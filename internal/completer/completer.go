// Package completer writes job outcomes to the store in batches: one
// JobFinish call carries every outcome that arrived while the previous one
// was being written, so a busy worker pays one round trip for many jobs and
// an idle one pays no extra latency.
package completer

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/twicejobs/twice/internal/logattr"
	"github.com/twicejobs/twice/twicestore"
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
// written, or given up. leaseUntil tells when the job's lease ends (it may
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
func (c *Completer) write(batch []item) {
	var (
		res  *twicestore.JobFinishResult
		err  error
		wait = retryFirst
	)
	for try := 0; ; try++ {
		if try > 0 {
			batch = c.giveUp(batch, try, wait, err)
			if len(batch) == 0 {
				return
			}
			if !c.pause(wait) {
				break // aborted: err is the last failure
			}
			wait = min(2*wait, retryMax)
		}
		if c.ctx.Err() != nil {
			err = c.ctx.Err()
			break
		}
		outcomes := make([]*twicestore.JobOutcome, len(batch))
		for i, it := range batch {
			outcomes[i] = it.outcome
		}
		ctx, cancel := context.WithTimeout(c.ctx, writeTimeout)
		res, err = c.exec.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: outcomes})
		cancel()
		if err == nil {
			break
		}
		if c.ctx.Err() == nil {
			c.logger.Warn("writing job outcomes failed; retrying while their leases hold", logattr.Err, err,
				"jobs", len(batch), "try", try+1)
		}
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
