package twicepg

// Wake-ups on insert: inserts send pg_notify (rate-limited per queue in this
// process), and ListenInserts delivers them to the workers.

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// insertChannel is the notification channel of the public schema; other
// schemas append their name to it (see channelFor).
const insertChannel = "twice_insert"

// notifyInterval is how long after notifying a queue inside a transaction a
// Store skips further in-transaction notifications for it: a worker woken
// fetches everything due, so one wake-up per burst is enough. It applies
// only to inserts in a caller's transaction (Begin, ExecutorFromTx), whose
// notification must ride on that transaction's commit; an insert on the
// Store itself notifies after its commit, from the notifier's sender (see
// notifier.committed), which needs no window.
const notifyInterval = 2 * time.Millisecond

// Reconnection backoff of ListenInserts: from listenBackoffMin, doubling up to
// listenBackoffMax, with jitter, and back to the minimum once listening.
const (
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

// channelFor returns the insert channel of schema. Channels are database-wide,
// so each schema has its own; a channel name is an identifier of at most 63
// bytes, so a long schema name is replaced by its hash.
func channelFor(schema string) string { return schemaChannel(insertChannel, schema) }

// toggleChannel is the kill switch channel of the public schema: ToggleSet
// and ToggleDelete notify it, so workers re-read the switches at once.
const toggleChannel = "twice_toggle"

// schemaChannel is base in the public schema and base.schema elsewhere.
func schemaChannel(base, schema string) string {
	if schema == "public" {
		return base
	}
	ch := base + "." + schema
	if len(ch) > 63 {
		h := fnv.New64a()
		h.Write([]byte(schema))
		ch = fmt.Sprintf("%s.%016x", base, h.Sum64())
	}
	return ch
}

// notifyInStatement, set by benchmarks only, makes inserts on the pool
// notify in their own statement again, as they did before the sender, so
// the two can be measured side by side.
var notifyInStatement = false

// notifySendTimeout bounds one notification statement of the sender.
const notifySendTimeout = 5 * time.Second

// closeFlushTimeout bounds how long Store.Close waits for the sender to
// notify the inserts committed before it: a process that enqueues and
// exits ('twice enqueue', a script, a serverless handler) closes its store
// at once, and a wake-up still pending then was lost, leaving the job to
// the workers' next poll. Two seconds is hundreds of notification round
// trips; a server that answers none in that time is one the workers' own
// polling covers.
const closeFlushTimeout = 2 * time.Second

// notifier rate-limits insert notifications per queue. The Store and every
// executor it hands out share one.
//
// PostgreSQL serialises the commits of transactions that notify: each holds
// a database-wide lock from its pre-commit to the end of its commit,
// including the commit's WAL flush. Inserts that notified in their own
// statement therefore committed one at a time, a flush each, and a stream of
// single inserts faster than one flush per notification queued up behind
// the lock holding a pool connection each: at 500 jobs/s with a 2 ms window
// every connection of a pool of 20 waited on that lock, and the workers'
// fetches and completions waited for a connection behind them (latency p50
// of seconds on a loaded machine). So an insert on the Store's pool does
// not notify; once it has committed it hands its queues to the sender, one
// goroutine sending one notification statement at a time on the pool: the
// inserts commit in parallel (and share WAL flushes), and every queue
// inserted into while a notification is in flight is notified by the next
// one, after that insert's commit. The sender adapts to the server: the
// slower a notification commits, the more inserts each one covers, and
// never is an insert left without a notification sent after its commit.
type notifier struct {
	channel       string // insert wake-ups
	toggleChannel string // kill switch changes
	cancelChannel string // cancel requests for running jobs (see jobs_cancel.go)

	// sendCtx is the context of the sender's statements; stopSending,
	// called by close, cancels it.
	sendCtx     context.Context
	stopSending context.CancelFunc

	mu   sync.Mutex
	last map[string]time.Time // queue → when it was last notified in a transaction
	// pending are the queues of committed inserts that the sender has not
	// notified yet; sent is non-nil while the sender's goroutine runs, and
	// closed when it returns, having sent every pending queue.
	pending map[string]bool
	sent    chan struct{}
}

func newNotifier(schema string) *notifier {
	ctx, stop := context.WithCancel(context.Background())
	return &notifier{channel: channelFor(schema), toggleChannel: schemaChannel(toggleChannel, schema),
		cancelChannel: schemaChannel(cancelChannel, schema), last: map[string]time.Time{}, pending: map[string]bool{},
		sendCtx: ctx, stopSending: stop}
}

// insertNotify returns the queues insertSQL is to notify in its own
// statement, and the function to call once that statement has returned
// without error. An insert in a caller's transaction notifies in the
// statement, so the notification is delivered on that transaction's commit
// and never for a rollback (rate-limited by due). An insert on the Store's
// pool commits when its statement ends: it notifies nothing itself, and
// committed hands its queues to the sender.
func (e *executor) insertNotify(queues []string, now time.Time) (inStatement []string, committed func()) {
	q, ok := e.q.(pgxQuerier)
	if !ok || notifyInStatement {
		return e.notify.due(queues, now), func() {}
	}
	if _, onPool := q.c.(*pgxpool.Pool); !onPool {
		return e.notify.due(queues, now), func() {}
	}
	return []string{}, func() { e.notify.committed(q, queues) }
}

// committed queues a notification of queues, whose inserts have committed,
// and starts the sender if it is not running.
func (n *notifier) committed(q querier, queues []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, name := range queues {
		n.pending[name] = true
	}
	if n.sent != nil || len(n.pending) == 0 {
		return
	}
	n.sent = make(chan struct{})
	go n.send(q, n.sent)
}

// send notifies the pending queues, one statement at a time, until none is
// pending; then it closes sent. A failed statement loses its
// notifications: they are hints, and the workers' polling covers them, as
// it covers a lost connection.
func (n *notifier) send(q querier, sent chan struct{}) {
	for {
		n.mu.Lock()
		if len(n.pending) == 0 {
			n.sent = nil
			close(sent)
			n.mu.Unlock()
			return
		}
		queues := make([]string, 0, len(n.pending))
		for name := range n.pending {
			queues = append(queues, name)
		}
		clear(n.pending)
		n.mu.Unlock()
		ctx, cancel := context.WithTimeout(n.sendCtx, notifySendTimeout)
		_, _ = q.exec(ctx, `SELECT count(pg_notify($1, q)) FROM unnest($2::text[]) AS q`, n.channel, queues)
		cancel()
	}
}

// close waits until the sender has notified every insert committed
// before it, for at most timeout, then cancels the statement still in
// flight, if any: the pool can close without waiting for it. Inserts
// committed after close are not notified (their statements fail at
// once).
func (n *notifier) close(timeout time.Duration) {
	n.mu.Lock()
	sent := n.sent
	n.mu.Unlock()
	if sent != nil {
		t := time.NewTimer(timeout)
		select {
		case <-sent:
		case <-t.C:
		}
		t.Stop()
	}
	n.stopSending()
}

// due returns the distinct queues of an insert at now that were not
// notified in the notifyInterval before it, and records them as notified.
// It never returns nil, which would be a NULL array.
func (n *notifier) due(queues []string, now time.Time) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := []string{}
	for _, q := range queues {
		if last, ok := n.last[q]; ok && now.Sub(last) < notifyInterval && !now.Before(last) {
			continue
		}
		n.last[q] = now
		out = append(out, q)
	}
	// Queues are few, but their names come from callers: forget stale ones
	// so the map cannot grow without bound.
	if len(n.last) > 1000 {
		for q, last := range n.last {
			if now.Sub(last) >= notifyInterval {
				delete(n.last, q)
			}
		}
	}
	return out
}

// ListenInserts calls notify with the queue name whenever jobs were inserted
// into that queue, by any process using this database and schema, until ctx
// is done; then it returns ctx's error.
//
// It listens on a connection of its own, taken out of the pool for good (so
// it does not count against the pool's size, and the pool's connect hooks
// still apply). When that connection is lost it connects again, after a
// backoff of 100ms doubling to 5s, with jitter. Notifications sent while it
// is not listening are lost: the workers' polling covers them. notify runs
// on ListenInserts' goroutine and should return quickly.
func (s *Store) ListenInserts(ctx context.Context, notify func(queue string)) error {
	return s.listenLoop(ctx, s.notify.channel, notify)
}

// ListenToggles calls notify whenever a kill switch is set or deleted (by
// any process), until ctx is done; it reconnects like ListenInserts. It
// implements twicestore.ToggleListener.
func (s *Store) ListenToggles(ctx context.Context, notify func()) error {
	return s.listenLoop(ctx, s.notify.toggleChannel, func(string) { notify() })
}

// listenLoop listens on channel, reconnecting with backoff, until ctx is
// done.
func (s *Store) listenLoop(ctx context.Context, channel string, notify func(payload string)) error {
	backoff := listenBackoffMin
	for {
		// The error is the lost connection's; the only thing to do about
		// it is to connect again.
		_ = s.listen(ctx, channel, notify, func() { backoff = listenBackoffMin })
		if ctx.Err() != nil {
			return ctx.Err()
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, listenBackoffMax)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// listen runs one listening connection until it fails or ctx is done,
// calling listening once it listens.
func (s *Store) listen(ctx context.Context, channel string, notify func(payload string), listening func()) error {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	conn := pc.Hijack()
	defer func() {
		// ctx may be done; closing still deserves a moment to say goodbye.
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return err
	}
	listening()
	if s.onListen != nil {
		s.onListen(conn.PgConn().PID())
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		notify(n.Payload)
	}
}
