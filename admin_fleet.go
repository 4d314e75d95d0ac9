package twice

import (
	"context"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// Orphans lists kinds with waiting jobs that no live worker handles. Such
// jobs are never failed or dropped; they wait for a worker that knows them.
func (c *Client) Orphans(ctx context.Context) ([]twicetype.OrphanKind, error) {
	res, err := c.store.JobOrphans(ctx, &twicestore.JobOrphansParams{AliveSince: c.now().Add(-nodeAliveWindow)})
	if err != nil {
		return nil, err
	}
	return res.Kinds, nil
}

// StrandedQueues lists queues with waiting jobs that no live worker
// serves: a worker may know their kinds, but none fetches from the queue.
// Such jobs are never failed or dropped; they wait for a worker that lists
// the queue in its Config.Queues.
func (c *Client) StrandedQueues(ctx context.Context) ([]twicetype.StrandedQueue, error) {
	res, err := c.store.QueueStranded(ctx, &twicestore.QueueStrandedParams{AliveSince: c.now().Add(-nodeAliveWindow)})
	if err != nil {
		return nil, err
	}
	return res.Queues, nil
}

func (c *Client) queueNames() []string {
	names := make([]string, len(c.cfg.Queues))
	for i, q := range c.cfg.Queues {
		names[i] = q.Name
	}
	return names
}
