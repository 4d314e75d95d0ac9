package twice

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twicejobs/twice/twicestore"
)

// ErrNotInHandler is returned by Job.Then and EnqueueNext outside a running
// handler: a continuation is inserted with its parent's completion.
var ErrNotInHandler = errors.New("twice: Then and EnqueueNext work only inside a running handler " +
	"(a continuation is inserted with its parent job's completion); outside one, use Client.Enqueue")

// edgeSet gathers the continuations one delivery of a job records. They
// travel with that delivery's outcome and are inserted only if it is the
// outcome written (see twicestore.Composer), so a failed, fenced or
// repeated delivery inserts none.
type edgeSet struct {
	ctx   context.Context
	build func(ctx context.Context, args Args, opts *EnqueueOpts) (*twicestore.JobInsertParams, error)
	// store and jobID answer Dependencies.
	store twicestore.Executor
	jobID int64

	mu       sync.Mutex
	children []*twicestore.JobInsertParams
}

type edgeSetKey struct{}

// withEdgeSet returns ctx carrying the delivery's edge set.
func withEdgeSet(ctx context.Context, es *edgeSet) context.Context {
	es.ctx = ctx
	return context.WithValue(ctx, edgeSetKey{}, es)
}

// edgeSetOf returns the edge set ctx carries, or nil outside a handler.
func edgeSetOf(ctx context.Context) *edgeSet {
	es, _ := ctx.Value(edgeSetKey{}).(*edgeSet)
	return es
}

// add checks args and records them as a continuation.
func (es *edgeSet) add(args Args, opts *EnqueueOpts) error {
	if es == nil || es.build == nil {
		return ErrNotInHandler
	}
	p, err := es.build(es.ctx, args, opts)
	if err != nil {
		return err
	}
	es.mu.Lock()
	defer es.mu.Unlock()
	es.children = append(es.children, p)
	return nil
}

// take returns the recorded continuations and forgets them, so a second
// outcome of the same delivery cannot carry them again.
func (es *edgeSet) take() []*twicestore.JobInsertParams {
	if es == nil {
		return nil
	}
	es.mu.Lock()
	defer es.mu.Unlock()
	c := es.children
	es.children = nil
	return c
}

// Then records a continuation: a job that is enqueued when, and only when,
// this job's completion is recorded, in the same write (for Transactional
// kinds, in the handler's transaction). An attempt that fails, loses its
// lease or is rolled back inserts nothing, and a redelivery of a job whose
// completion was already recorded inserts nothing again: each continuation
// is enqueued exactly once, however often the handler runs.
//
// The args are checked now (payload policy, size, options), so a bad
// continuation is the handler's error, not a lost edge. Called outside a
// running handler, Then returns ErrNotInHandler.
func (j *Job[T]) Then(args Args, opts *EnqueueOpts) error {
	if j == nil {
		return ErrNotInHandler
	}
	return j.edges.add(args, opts)
}

// EnqueueNext is Job.Then for code with the handler's context, not its job.
func EnqueueNext(ctx context.Context, args Args, opts *EnqueueOpts) error {
	return edgeSetOf(ctx).add(args, opts)
}

// childParams checks and resolves one continuation as an Enqueue would.
func (c *Client) childParams(ctx context.Context, args Args, opts *EnqueueOpts) (*twicestore.JobInsertParams, error) {
	ctx, end := c.traceEnqueue(ctx, traceOpContinuation, 1)
	ps, err := c.insertParamsMany(ctx, []EnqueueParams{{Args: args, Opts: opts}})
	if err != nil {
		err = fmt.Errorf("twice: continuation: %w", err)
		end(nil, err)
		return nil, err
	}
	end(nil, nil) // stored with the parent's completion
	return ps[0], nil
}

// insertParamsMany checks and resolves jobs, refusing all of them when
// one is wrong: the one loop every entry point's jobs go through
// (Enqueue and EnqueueMany, continuations, workflows, batches).
func (c *Client) insertParamsMany(ctx context.Context, jobs []EnqueueParams) ([]*twicestore.JobInsertParams, error) {
	params := make([]*twicestore.JobInsertParams, len(jobs))
	var errs []error
	for i, j := range jobs {
		if j.Args == nil {
			errs = append(errs, fmt.Errorf("job %d: args are nil", i))
			continue
		}
		b, err := encodeArgs(j.Args, c.cfg.MaxArgsBytes)
		if err != nil {
			errs = append(errs, fmt.Errorf("job %d: %w", i, err))
			continue
		}
		key := ""
		if k, ok := j.Args.(IdempotencyKeyer); ok {
			if key = k.IdempotencyKey(); key == "" {
				errs = append(errs, fmt.Errorf("job %d: kind %q: IdempotencyKey() returned an empty key", i, j.Args.Kind()))
				continue
			}
		}
		if params[i], err = c.insertParams(ctx, j.Args.Kind(), b, key, j.Opts); err != nil {
			errs = append(errs, fmt.Errorf("job %d: %w", i, err))
		}
	}
	if len(errs) > 0 {
		if len(jobs) == 1 {
			return nil, fmt.Errorf("%w: %w", ErrInvalidArgs, errors.Unwrap(errs[0]))
		}
		return nil, fmt.Errorf("%w: nothing stored: %w", ErrInvalidArgs, errors.Join(errs...))
	}
	return params, nil
}

// ErrNotInWorkflow: Dependencies in a job that is no workflow task.
var ErrNotInWorkflow = errors.New("twice: this job is not a workflow task, so it has no dependencies")

// Dependencies returns, inside a workflow task's handler, the job id of
// each task it depends on, by task name; all of them completed before this
// task was enqueued. Read a dependency's output with the client's
// JobResult. Outside a handler it returns ErrNotInHandler; in a job that
// is no workflow task, ErrNotInWorkflow.
func Dependencies(ctx context.Context) (map[string]int64, error) {
	es := edgeSetOf(ctx)
	if es == nil || es.store == nil {
		return nil, ErrNotInHandler
	}
	res, err := es.store.WorkflowTaskOf(ctx, &twicestore.WorkflowTaskOfParams{JobID: es.jobID})
	if errors.Is(err, twicestore.ErrNotFound) {
		return nil, ErrNotInWorkflow
	}
	if err != nil {
		return nil, fmt.Errorf("twice: dependencies of job %d: %w", es.jobID, err)
	}
	return res.Deps, nil
}
