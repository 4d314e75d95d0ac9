package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// WaitArgs is the bench's waiting job: it awaits the signal "go", whose
// payload is the signal's send time in Unix nanoseconds, and ends.
type WaitArgs struct {
	Run int64 `json:"run"`
	N   int64 `json:"n"`
}

// Kind names the bench's waiting kind.
func (WaitArgs) Kind() string { return "bench.wait.v1" }

// waitSignal is the signal the bench's waiting jobs await.
const waitSignal = "go"

// registerWait adds the waiting kind to reg: a resume of this run's job
// records its signal-to-start time.
func (r *runner) registerWait(reg *twice.Registry) error {
	return twice.Register(reg, twice.HandlerFunc[WaitArgs](func(ctx context.Context, job *twice.Job[WaitArgs]) error {
		sent, err := twice.AwaitSignal[int64](ctx, waitSignal, twice.NoTimeout)
		if err != nil || job.Args.Run != r.runID {
			return err
		}
		lat := time.Since(time.Unix(0, sent))
		r.mu.Lock()
		defer r.mu.Unlock()
		r.latencies = append(r.latencies, lat)
		if r.started.Add(1) == r.target {
			close(r.all)
		}
		return nil
	}), &twice.KindOpts{Strategy: twice.None})
}

// park enqueues n waiting jobs and runs a client until all of them are
// parked, and returns their ids. The timing starts after it.
func (r *runner) park(ctx context.Context, n int) ([]int64, error) {
	c, err := r.client()
	if err != nil {
		return nil, err
	}
	ids := make([]int64, 0, n)
	batch := make([]twice.EnqueueParams, 0, insertBatch)
	for i := range n {
		batch = append(batch, twice.EnqueueParams{Args: WaitArgs{Run: r.runID, N: int64(i)}})
		if len(batch) == cap(batch) || i == n-1 {
			res, err := c.EnqueueMany(ctx, batch)
			if err != nil {
				return nil, fmt.Errorf("insert waiting bench jobs: %w", err)
			}
			for _, j := range res {
				ids = append(ids, j.Job.ID)
			}
			batch = batch[:0]
		}
	}
	stop := r.progress(ctx, func(time.Duration) string { return fmt.Sprintf("parking %d jobs", n) })
	defer stop()
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	werr := r.waitParked(ctx, ids)
	serr := c.Stop(context.WithoutCancel(ctx))
	return ids, errors.Join(werr, serr)
}

// waitParked polls until every job of ids is waiting.
func (r *runner) waitParked(ctx context.Context, ids []int64) error {
	deadline := time.Now().Add(waitTimeout)
	for {
		parked := 0
		for i := 0; i < len(ids); i += 10_000 {
			res, err := r.cfg.Store.JobCount(ctx, &twicestore.JobCountParams{Filter: twicestore.JobFilter{
				State: twicetype.JobStateWaiting, IDs: ids[i:min(i+10_000, len(ids))]}})
			if err != nil {
				return err
			}
			for _, jc := range res.Counts {
				parked += jc.Count
			}
		}
		if parked == len(ids) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d jobs parked after %s", parked, len(ids), waitTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// signal parks Rate×Duration jobs, then sends each its signal, one at a
// time at Rate a second, and measures each one's signal-to-start time:
// from the call of Client.Signal to the handler's resumption.
func (r *runner) signal(ctx context.Context) (*Result, error) {
	n := max(1, r.cfg.Rate*int(r.cfg.Duration/time.Second))
	ids, err := r.park(ctx, n)
	if err != nil {
		return nil, err
	}
	all := r.expect(int64(n))
	c, err := r.client()
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	defer func() { _ = c.Stop(context.WithoutCancel(ctx)) }()
	var sent atomic.Int64
	stop := r.progress(ctx, func(el time.Duration) string {
		return fmt.Sprintf("%d of %d signals sent in %s", sent.Load(), n, el.Truncate(time.Second))
	})
	defer stop()
	var (
		wg   sync.WaitGroup
		errs = make(chan error, 1)
	)
	t0 := time.Now()
	tick := time.NewTicker(time.Second / time.Duration(r.cfg.Rate))
	defer tick.Stop()
	for _, id := range ids {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case err := <-errs:
			wg.Wait()
			return nil, err
		case <-tick.C:
		}
		sent.Add(1)
		wg.Go(func() {
			at := time.Now().UnixNano()
			if _, err := c.Signal(ctx, &twice.SignalParams{JobID: id, Name: waitSignal, Payload: at, By: "bench"}); err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	wg.Wait()
	if err := r.wait(ctx, all, fmt.Sprintf("of %d signalled jobs resumed", n)); err != nil {
		return nil, err
	}
	res := &Result{Jobs: n, Seconds: round(time.Since(t0).Seconds(), 3)}
	r.mu.Lock()
	res.Percentiles(r.latencies)
	r.mu.Unlock()
	return res, nil
}
