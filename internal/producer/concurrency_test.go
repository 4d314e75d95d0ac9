package producer

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice/internal/testkit/waitfor"
)

// TestSetQueueConcurrency: a queue raised at runtime runs more jobs at
// once (MaxWorkers following it), and one lowered lets its running jobs
// finish and starts no more until it is under the new value.
func TestSetQueueConcurrency(t *testing.T) {
	const jobs = 8
	store := storeWithJobs(t, jobs)
	var (
		mu      sync.Mutex
		running int
		peak    int // the most running as a job started, once watching
		watch   bool
		done    int
	)
	release := make(chan struct{})
	p := New(Config{
		Exec: store, Queues: []Queue{{Name: "q", Concurrency: 1}}, MaxWorkers: 1, MaxWorkersFromQueues: true,
		Kinds: func() []string { return []string{"k.v1"} }, Node: "n", Lease: time.Minute,
		PollInterval: 10 * time.Millisecond, FetchLimit: 10, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Run: func(Fetched) {
			mu.Lock()
			running++
			if watch {
				peak = max(peak, running)
			}
			mu.Unlock()
			<-release
			mu.Lock()
			running--
			done++
			mu.Unlock()
		},
	})
	ctx, cancel := context.WithCancel(t.Context())
	go p.Run(ctx)
	defer func() {
		cancel()
		p.Wait()
	}()
	count := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return running, done
	}
	waitfor.Cond(t, "one job running", func() bool { r, _ := count(); return r == 1 }, nil)
	p.SetQueueConcurrency(map[string]int{"q": 4, "unknown": 9})
	waitfor.Cond(t, "four jobs running once the queue is raised", func() bool { r, _ := count(); return r == 4 },
		func() string { r, _ := count(); return fmt.Sprint(r, " running") })

	p.SetQueueConcurrency(map[string]int{"q": 2})
	mu.Lock()
	watch = true
	mu.Unlock()
	close(release)
	waitfor.Cond(t, "every job done", func() bool { _, d := count(); return d == jobs }, nil)
	mu.Lock()
	defer mu.Unlock()
	if peak > 2 {
		t.Errorf("after lowering the queue to 2 a job started with %d running", peak)
	}
}
