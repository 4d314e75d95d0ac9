// Package peeker gathers the marker peeks of ClaimAfter jobs that start at
// the same time into one MarkerPeekMany call, so a worker that fetched a
// thousand jobs pays a few round trips for their peeks instead of a
// thousand. There is no goroutine of its own: the first caller to find no
// batch in flight leads, running the batches of the peeks that arrived
// meanwhile; when its batch is written it hands the lead to the first
// caller still waiting, so no caller waits for more than its own batch and
// the one before it.
package peeker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twicejobs/twice/twicestore"
)

// MaxBatch is the most peeks one call carries.
const MaxBatch = 1000

// queryTimeout bounds one batch. A batch serves many callers, so it runs on
// a context none of them can cancel alone.
const queryTimeout = 30 * time.Second

// Peeker batches peeks through a store's MarkerPeekMany. It is safe for
// concurrent use.
type Peeker struct {
	store twicestore.MarkerBatchPeeker

	// mu guards pending and leading: whether a caller is running batches.
	mu      sync.Mutex
	pending []*request
	leading bool
}

type request struct {
	marker twicestore.MarkerParams
	done   chan reply // buffered: the sender never waits
}

type reply struct {
	processed bool
	err       error
	lead      bool // the receiver leads the next batch instead
}

// New returns a Peeker on store.
func New(store twicestore.MarkerBatchPeeker) *Peeker {
	return &Peeker{store: store}
}

// Peek reports whether m's handler has processed its key, as MarkerPeek
// would, answered in a batch with the peeks that arrived with it. ctx's
// values are kept but its cancellation does not stop a batch others wait
// for.
func (p *Peeker) Peek(ctx context.Context, m *twicestore.MarkerParams) (*twicestore.MarkerPeekResult, error) {
	r := &request{marker: *m, done: make(chan reply, 1)}
	p.mu.Lock()
	p.pending = append(p.pending, r)
	lead := !p.leading
	p.leading = true
	p.mu.Unlock()
	if !lead {
		rep := <-r.done
		if !rep.lead {
			return &twicestore.MarkerPeekResult{Processed: rep.processed}, rep.err
		}
	}
	// This caller leads: its request is the first pending one, so the
	// batch it runs answers it.
	p.runBatch(ctx)
	rep := <-r.done
	return &twicestore.MarkerPeekResult{Processed: rep.processed}, rep.err
}

// runBatch answers up to MaxBatch pending peeks, then hands the lead to the
// first caller still waiting, or gives it up.
func (p *Peeker) runBatch(ctx context.Context) {
	p.mu.Lock()
	n := min(len(p.pending), MaxBatch)
	batch := p.pending[:n:n]
	p.pending = p.pending[n:]
	p.mu.Unlock()

	markers := make([]twicestore.MarkerParams, len(batch))
	for i, r := range batch {
		markers[i] = r.marker
	}
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), queryTimeout)
	res, err := p.store.MarkerPeekMany(qctx, &twicestore.MarkerPeekManyParams{Markers: markers})
	cancel()
	if err == nil && len(res.Processed) != len(batch) {
		err = fmt.Errorf("peek markers: %d answers for %d peeks", len(res.Processed), len(batch))
	}
	for i, r := range batch {
		if err != nil {
			r.done <- reply{err: err}
			continue
		}
		r.done <- reply{processed: res.Processed[i]}
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pending) == 0 {
		p.leading = false
		return
	}
	p.pending[0].done <- reply{lead: true}
}
