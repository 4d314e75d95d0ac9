package twice

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// QueuePauseParams name the queue to pause, until when, who pauses it and
// why.
type QueuePauseParams struct {
	Queue string
	// Until ends the pause by itself; it must be in the future. Zero
	// pauses until QueueResume.
	Until  time.Time
	By     string
	Reason string
}

// QueueResumeParams name the queue to resume, who resumes it and why.
type QueueResumeParams struct {
	Queue  string
	By     string
	Reason string
}

// QueueResumeResult tells whether a pause was lifted.
type QueueResumeResult struct {
	// Resumed is false when the queue was not paused (or its pause had run
	// out): nothing changed.
	Resumed bool
}

// QueueInfo is one queue as an operator sees it: its pause, its jobs, and
// the live nodes that work it.
type QueueInfo struct {
	twicetype.QueueInfo
	// Nodes lists the live nodes that work the queue. A queue with jobs
	// waiting and no nodes is stranded: its jobs wait until a worker that
	// serves it starts.
	Nodes []string
}

// QueuePause pauses a queue on every node: no node fetches its jobs until
// QueueResume, or until p.Until. Jobs already running go on; waiting jobs
// keep their attempts. A queue that is in no catalog, served by no live
// node or this client, and holds no jobs is refused (ErrUnknownQueue), so
// a typo does not pause nothing while the operator thinks it paused
// something.
func (c *Client) QueuePause(ctx context.Context, p *QueuePauseParams) error {
	return c.queuePause(ctx, c.store, p)
}

// QueuePauseTx is QueuePause in the caller's transaction.
func (c *Client) QueuePauseTx(ctx context.Context, tx any, p *QueuePauseParams) error {
	exec, err := c.adminExec("pause queue", tx)
	if err != nil {
		return err
	}
	return c.queuePause(ctx, exec, p)
}

// QueueResume lifts a queue's pause on every node.
func (c *Client) QueueResume(ctx context.Context, p *QueueResumeParams) (*QueueResumeResult, error) {
	return c.queueResume(ctx, c.store, p)
}

// QueueResumeTx is QueueResume in the caller's transaction.
func (c *Client) QueueResumeTx(ctx context.Context, tx any, p *QueueResumeParams) (*QueueResumeResult, error) {
	exec, err := c.adminExec("resume queue", tx)
	if err != nil {
		return nil, err
	}
	return c.queueResume(ctx, exec, p)
}

// QueueList lists every known queue by name: those with jobs or a pause,
// those the catalog's kinds go to, and those live nodes and this client
// work, each with its pause, its due, scheduled and running jobs, and the
// live nodes that work it.
func (c *Client) QueueList(ctx context.Context) ([]QueueInfo, error) {
	queues, err := c.queueList(ctx, c.store, c.now())
	if err != nil {
		return nil, fmt.Errorf("twice: %w", err)
	}
	return queues, nil
}

func (c *Client) queuePause(ctx context.Context, exec twicestore.Executor, p *QueuePauseParams) error {
	if p == nil {
		return fmt.Errorf("twice: pause queue: %w", invalidf("no queue named"))
	}
	if err := checkFields(byField(p.By), reasonField(p.Reason)); err != nil {
		return fmt.Errorf("twice: pause queue: %w", err)
	}
	now := c.now()
	if err := c.checkQueueArg(ctx, exec, "pause", p.Queue, now); err != nil {
		return err
	}
	if err := notFuture("until", p.Until, now); err != nil {
		return fmt.Errorf("twice: pause queue %q: %w", p.Queue, err)
	}
	by := byOr(p.By)
	err := exec.QueuePause(ctx, &twicestore.QueuePauseParams{Queue: p.Queue, Until: p.Until, By: by, Reason: p.Reason, Now: now})
	if err != nil {
		return fmt.Errorf("twice: %w", err) // the store's error names the queue
	}
	attrs := []any{"queue", p.Queue}
	if !p.Until.IsZero() {
		attrs = append(attrs, "until", p.Until)
	}
	c.logAction(ctx, "queue paused", by, p.Reason, attrs...)
	return nil
}

func (c *Client) queueResume(ctx context.Context, exec twicestore.Executor, p *QueueResumeParams) (*QueueResumeResult, error) {
	if p == nil {
		return nil, fmt.Errorf("twice: resume queue: %w", invalidf("no queue named"))
	}
	if err := checkFields(byField(p.By), reasonField(p.Reason)); err != nil {
		return nil, fmt.Errorf("twice: resume queue: %w", err)
	}
	now := c.now()
	if err := c.checkQueueArg(ctx, exec, "resume", p.Queue, now); err != nil {
		return nil, err
	}
	res, err := exec.QueueResume(ctx, &twicestore.QueueResumeParams{Queue: p.Queue, Now: now})
	if err != nil {
		return nil, fmt.Errorf("twice: %w", err) // the store's error names the queue
	}
	if res.Resumed {
		c.logAction(ctx, "queue resumed", byOr(p.By), p.Reason, "queue", p.Queue)
		c.notify()
	}
	return &QueueResumeResult{Resumed: res.Resumed}, nil
}

// checkQueueArg refuses an empty or unknown queue, naming the known ones.
func (c *Client) checkQueueArg(ctx context.Context, exec twicestore.Executor, verb, queue string, now time.Time) error {
	if err := ValidateQueue(queue); err != nil {
		return fmt.Errorf("twice: %s queue: %w", verb, invalidf("%v", err))
	}
	queues, err := c.queueList(ctx, exec, now)
	if err != nil {
		return fmt.Errorf("twice: %s queue %q: %w", verb, queue, err)
	}
	names := make([]string, len(queues))
	for i, q := range queues {
		if q.Name == queue {
			return nil
		}
		names[i] = q.Name
	}
	known := "none"
	if len(names) > 0 {
		known = strings.Join(names, ", ")
	}
	return fmt.Errorf("twice: %s queue %q: %w: no catalogued kind goes to it, no worker serves it and it holds no jobs (known queues: %s)",
		verb, queue, ErrUnknownQueue, known)
}

// queueList merges the store's queues (those with jobs or a pause) with the
// queues the catalog, the live nodes, this client's config and registry
// name.
func (c *Client) queueList(ctx context.Context, exec twicestore.Executor, now time.Time) ([]QueueInfo, error) {
	res, err := exec.QueueList(ctx, &twicestore.QueueListParams{Now: now})
	if err != nil {
		return nil, err // the store's error says "list queues"
	}
	byName := map[string]*QueueInfo{}
	add := func(name string) *QueueInfo {
		q := byName[name]
		if q == nil {
			q = &QueueInfo{QueueInfo: twicetype.QueueInfo{Name: name}}
			byName[name] = q
		}
		return q
	}
	for _, q := range res.Queues {
		add(q.Name).QueueInfo = q
	}
	nodes, err := exec.NodeList(ctx, &twicestore.NodeListParams{AliveSince: now.Add(-nodeAliveWindow)})
	if err != nil {
		return nil, err // the store's error says "list nodes"
	}
	for _, n := range nodes {
		for _, name := range n.Queues {
			q := add(name)
			q.Nodes = append(q.Nodes, n.ID)
		}
	}
	cat, err := exec.CatalogList(ctx, &twicestore.CatalogListParams{})
	if err != nil {
		return nil, fmt.Errorf("read the kind catalog: %w", err)
	}
	for _, k := range cat.Kinds {
		if k.Queue != "" {
			add(k.Queue)
		}
	}
	for _, name := range c.queueNames() {
		add(name)
	}
	for _, kind := range c.registry.Kinds() {
		add(c.queueFor(kind, ""))
	}
	out := make([]QueueInfo, 0, len(byName))
	for _, q := range byName {
		slices.Sort(q.Nodes)
		out = append(out, *q)
	}
	slices.SortFunc(out, func(a, b QueueInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
