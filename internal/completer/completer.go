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
const MaxBatchDefault = 500

// writeTimeout bounds one batch write; outcomes are written even during
// shutdown, so they run on a context that is not the caller's.
const writeTimeout = 30 * time.Second

// Done is told whether an outcome was applied (false: the lease was lost)
// or could not be written at all (err).
type Done func(applied bool, err error)

type item struct {
	outcome *twicestore.JobOutcome
	done    Done
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
// written. It blocks while the buffer is full. After Stop, or once the
// completer is aborted, it queues nothing and returns false: a handler
// that outlived the shutdown leaves its job to the lease.
func (c *Completer) Add(o *twicestore.JobOutcome, done Done) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed || c.ctx.Err() != nil {
		return false
	}
	select {
	case c.in <- item{outcome: o, done: done}:
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

// write records one batch, retrying a failed write a few times: an outcome
// that is never written is not lost (the lease expires and the job runs
// again), but it costs a duplicate delivery, so it is worth a retry.
func (c *Completer) write(batch []item) {
	outcomes := make([]*twicestore.JobOutcome, len(batch))
	for i, it := range batch {
		outcomes[i] = it.outcome
	}
	var (
		res *twicestore.JobFinishResult
		err error
	)
	for try := range 4 {
		if try > 0 && !c.pause(time.Duration(try)*200*time.Millisecond) {
			break // aborted: err is the last failure
		}
		if c.ctx.Err() != nil {
			err = c.ctx.Err()
			break
		}
		ctx, cancel := context.WithTimeout(c.ctx, writeTimeout)
		res, err = c.exec.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: outcomes})
		cancel()
		if err == nil {
			break
		}
		if try < 3 && c.ctx.Err() == nil {
			c.logger.Warn("writing job outcomes failed; retrying", logattr.Err, err, "jobs", len(batch))
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
