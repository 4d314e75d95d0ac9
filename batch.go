package twice

import (
	"context"
	"fmt"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// Batch is a group of jobs with a callback job that is enqueued exactly
// once, when every job of the batch has finished. Build it with NewBatch,
// then enqueue it with Client.EnqueueBatch.
//
// The batch keeps counters (pending, completed, dead, cancelled) that the
// write finishing each of its jobs updates in the same transaction, so a
// batch of 100,000 jobs costs each job one counter update, never a scan of
// the batch, and the write that finishes the last job is the one that
// enqueues the callback.
type Batch struct {
	callback     Args
	callbackOpts *EnqueueOpts
	onSuccess    bool
	open         bool
	jobs         []EnqueueParams
}

// NewBatch starts a batch whose callback is a job of args (with opts, which
// may be nil). By default the callback runs once every job has finished,
// however (see OnSuccess).
func NewBatch(callback Args, opts *EnqueueOpts) *Batch {
	return &Batch{callback: callback, callbackOpts: opts}
}

// Add adds jobs to the batch; it returns the batch, for chaining.
func (b *Batch) Add(args Args, opts *EnqueueOpts) *Batch {
	b.jobs = append(b.jobs, EnqueueParams{Args: args, Opts: opts})
	return b
}

// OnSuccess makes the callback wait until every job has completed: while
// any is dead, discarded or cancelled (or was deleted unfinished) there is
// no callback. Once its last job finishes such a batch is finished with
// failures all the same (BatchGet: FinishedAt set, Failed true);
// retrying the failed jobs and seeing them complete brings the callback.
func (b *Batch) OnSuccess() *Batch {
	b.onSuccess = true
	return b
}

// KeepOpen leaves the batch open after EnqueueBatch: Client.BatchAdd adds
// more jobs, and the callback waits for Client.BatchSeal even when every
// job so far has finished.
func (b *Batch) KeepOpen() *Batch {
	b.open = true
	return b
}

// BatchResult is an enqueued batch.
type BatchResult struct {
	Batch *twicetype.Batch
	// Jobs has one result per job added, in order.
	Jobs []*EnqueueResult
}

// EnqueueBatch stores the batch and its jobs in one transaction. A batch
// with no jobs that is not kept open enqueues its callback at once.
func (c *Client) EnqueueBatch(ctx context.Context, b *Batch) (*BatchResult, error) {
	return c.enqueueBatch(ctx, c.store, b, true)
}

// EnqueueBatchTx is EnqueueBatch in the caller's transaction.
func (c *Client) EnqueueBatchTx(ctx context.Context, tx any, b *Batch) (*BatchResult, error) {
	exec, err := c.store.ExecutorFromTx(tx)
	if err != nil {
		return nil, fmt.Errorf("twice: enqueue batch in transaction: %w", err)
	}
	return c.enqueueBatch(ctx, exec, b, false)
}

func (c *Client) enqueueBatch(ctx context.Context, exec twicestore.Executor, b *Batch, notify bool) (*BatchResult, error) {
	if b == nil || b.callback == nil {
		return nil, fmt.Errorf("twice: enqueue batch: %w: a batch needs a callback: build it with NewBatch(callbackArgs, nil)", ErrInvalidArgs)
	}
	ctx, end := c.traceEnqueue(ctx, traceOpBatch, len(b.jobs)+1)
	res, err := c.insertBatch(ctx, exec, b, notify)
	var rows []*twicetype.JobRow
	if res != nil {
		rows = insertedRows(res.Jobs)
	}
	end(rows, err)
	return res, err
}

// insertBatch checks and stores a batch with its callback.
func (c *Client) insertBatch(ctx context.Context, exec twicestore.Executor, b *Batch, notify bool) (*BatchResult, error) {
	cb, err := c.insertParamsMany(ctx, []EnqueueParams{{Args: b.callback, Opts: b.callbackOpts}})
	if err != nil {
		return nil, fmt.Errorf("twice: enqueue batch: callback: %w", err)
	}
	jobs, err := c.insertParamsMany(ctx, b.jobs)
	if err != nil {
		return nil, fmt.Errorf("twice: enqueue batch: %w", err)
	}
	res, err := exec.BatchInsert(ctx, &twicestore.BatchInsertParams{OnSuccess: b.onSuccess, Open: b.open,
		Callback: cb[0], Jobs: jobs, CreatedAt: c.now()})
	if err != nil {
		return nil, fmt.Errorf("twice: enqueue batch: %w", err)
	}
	if notify {
		c.notify()
	}
	return &BatchResult{Batch: res.Batch, Jobs: enqueueResults(res.Jobs)}, nil
}

func enqueueResults(rs []*twicestore.JobInsertResult) []*EnqueueResult {
	out := make([]*EnqueueResult, len(rs))
	for i, r := range rs {
		out[i] = &EnqueueResult{Job: r.Job, Duplicate: r.Duplicate}
	}
	return out
}

// BatchAdd adds jobs to an open batch (one enqueued with KeepOpen). A
// sealed batch refuses them with an error wrapping
// twicestore.ErrBatchSealed: its callback may have run.
func (c *Client) BatchAdd(ctx context.Context, id int64, jobs []EnqueueParams) (*BatchResult, error) {
	return c.batchAdd(ctx, c.store, id, jobs, true)
}

// BatchAddTx is BatchAdd in the caller's transaction.
func (c *Client) BatchAddTx(ctx context.Context, tx any, id int64, jobs []EnqueueParams) (*BatchResult, error) {
	exec, err := c.store.ExecutorFromTx(tx)
	if err != nil {
		return nil, fmt.Errorf("twice: add to batch in transaction: %w", err)
	}
	return c.batchAdd(ctx, exec, id, jobs, false)
}

func (c *Client) batchAdd(ctx context.Context, exec twicestore.Executor, id int64, jobs []EnqueueParams, notify bool) (*BatchResult, error) {
	ctx, end := c.traceEnqueue(ctx, traceOpBatch, len(jobs))
	params, err := c.insertParamsMany(ctx, jobs)
	if err != nil {
		err = fmt.Errorf("twice: add to batch %d: %w", id, err)
		end(nil, err)
		return nil, err
	}
	res, err := exec.BatchAdd(ctx, &twicestore.BatchAddParams{ID: id, Jobs: params})
	if err != nil {
		err = fmt.Errorf("twice: %w", err)
		end(nil, err)
		return nil, err
	}
	out := enqueueResults(res.Jobs)
	end(insertedRows(out), nil)
	if notify {
		c.notify()
	}
	return &BatchResult{Batch: res.Batch, Jobs: out}, nil
}

// BatchSeal closes an open batch to new jobs; once none is pending (at
// once, if none is), its callback is enqueued.
func (c *Client) BatchSeal(ctx context.Context, id int64) (*twicetype.Batch, error) {
	return c.batchSeal(ctx, c.store, id)
}

// BatchSealTx is BatchSeal in the caller's transaction.
func (c *Client) BatchSealTx(ctx context.Context, tx any, id int64) (*twicetype.Batch, error) {
	exec, err := c.store.ExecutorFromTx(tx)
	if err != nil {
		return nil, fmt.Errorf("twice: seal batch in transaction: %w", err)
	}
	return c.batchSeal(ctx, exec, id)
}

func (c *Client) batchSeal(ctx context.Context, exec twicestore.Executor, id int64) (*twicetype.Batch, error) {
	b, err := exec.BatchSeal(ctx, &twicestore.BatchSealParams{ID: id, Now: c.now()})
	if err != nil {
		return nil, fmt.Errorf("twice: %w", err)
	}
	return b, nil
}

// BatchGet returns a batch's counters and callback; an unknown id is an
// error wrapping twicestore.ErrNotFound.
func (c *Client) BatchGet(ctx context.Context, id int64) (*twicetype.Batch, error) {
	b, err := c.store.BatchGet(ctx, &twicestore.BatchGetParams{ID: id})
	if err != nil {
		return nil, fmt.Errorf("twice: %w", err)
	}
	return b, nil
}

// BatchListOpts select a page of batches; nil lists the newest 100.
type BatchListOpts struct {
	// Unfinished lists only the batches whose jobs are not all finished
	// (or that are still open).
	Unfinished bool
	Before     int64 // next page: ids below this one
	Limit      int   // Defaults to 100.
}

// BatchList lists batches newest first, with their counters.
func (c *Client) BatchList(ctx context.Context, opts *BatchListOpts) ([]*twicetype.Batch, error) {
	var o BatchListOpts
	if opts != nil {
		o = *opts
	}
	if o.Limit < 0 || o.Before < 0 {
		return nil, fmt.Errorf("twice: list batches: %w", invalidf("limit %d and before %d must not be negative", o.Limit, o.Before))
	}
	res, err := c.store.BatchList(ctx, &twicestore.BatchListParams{Unfinished: o.Unfinished, Before: o.Before, Limit: o.Limit})
	if err != nil {
		return nil, fmt.Errorf("twice: %w", err)
	}
	return res.Batches, nil
}
