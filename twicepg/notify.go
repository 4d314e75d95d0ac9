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
)

// insertChannel is the notification channel of the public schema; other
// schemas append their name to it (see channelFor).
const insertChannel = "twice_insert"

// notifyInterval is how long after notifying a queue a Store skips further
// notifications for it: a worker woken fetches everything due, so one wake-up
// per burst is enough. A job inserted in the skipped window waits for the
// next notification, so the window is the floor of enqueue-to-start latency
// under a steady stream: BenchmarkPostgresLatency at 500 jobs/s measured
// p50/p99 of 11.9/22.7 ms with 20 ms, 3.4/6.8 ms with 5 ms and 1.2/3.0 ms
// with 1 ms. 2 ms still caps a busy producer at 500 notifications a second
// per queue.
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

// notifier rate-limits insert notifications per queue. The Store and every
// executor it hands out share one.
type notifier struct {
	channel       string // insert wake-ups
	toggleChannel string // kill switch changes
	cancelChannel string // cancel requests for running jobs (see jobs_cancel.go)

	mu   sync.Mutex
	last map[string]time.Time // queue → when it was last notified
}

func newNotifier(schema string) *notifier {
	return &notifier{channel: channelFor(schema), toggleChannel: schemaChannel(toggleChannel, schema),
		cancelChannel: schemaChannel(cancelChannel, schema), last: map[string]time.Time{}}
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
