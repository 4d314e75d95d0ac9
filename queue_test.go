package twice_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
)

// TestQueuesInStrictPriority: with one slot, every critical job runs before
// any default job, and every default job before any bulk job, whatever the
// order they were enqueued in.
func TestQueuesInStrictPriority(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	ctx := context.Background()
	producer, err := twice.NewClient(store, testConfig(nil))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, q := range []string{twice.QueueBulk, twice.QueueDefault, twice.QueueCritical} {
		for range 3 {
			if _, err := producer.Enqueue(ctx, pingArgs{N: 1}, &twice.EnqueueOpts{Queue: q}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, q := range []string{twice.QueueCritical, twice.QueueDefault, twice.QueueBulk} {
		want = append(want, q, q, q)
	}

	var mu sync.Mutex
	var got []string
	all := make(chan struct{})
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[pingArgs](func(_ context.Context, job *twice.Job[pingArgs]) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, job.Queue)
		if len(got) == len(want) {
			close(all)
		}
		return nil
	}), &twice.KindOpts{Strategy: twice.None})
	cfg := testConfig(reg)
	cfg.MaxWorkers = 1
	startClient(t, store, cfg)
	waitfor.Closed(t, all, "every job to run")
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, want) {
		t.Errorf("run order = %v, want %v", got, want)
	}
}
