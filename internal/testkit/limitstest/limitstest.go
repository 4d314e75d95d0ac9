// Package limitstest starts a worker on one limited kind with a known
// usage, for the tests of the places that show flow control: the CLI's
// 'limits ls' and the dashboard's limits page.
package limitstest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
)

// Kind is the limited kind: one sync per tenant at a time (retries out of
// key order), two at most across the cluster, a hundred starts an hour.
const Kind = "tenant.sync.v1"

// syncArgs are Kind's args; the tenant is the concurrency key.
type syncArgs struct {
	Tenant string `json:"tenant"`
}

func (syncArgs) Kind() string { return Kind }

// StartWorker registers Kind with its limits, enqueues three jobs for acme
// and one for globex on store, and starts a worker on store whose handler
// holds every job until the test ends, when it stops the worker (store
// stays the caller's to close). It returns once the two jobs the limits
// allow (acme's first, globex's) are running, with the registry for the
// CLI or dashboard under test: Kind then has 2 running of 2 slots, 2 due
// jobs both throttled (acme's later two, waiting for acme's slot), 2 busy
// keys of 2, and 2 starts of 100 in its rate window.
func StartWorker(t *testing.T, store twicestore.Store) *twice.Registry {
	t.Helper()
	started := make(chan string, 8)
	release := make(chan struct{})
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[syncArgs](func(ctx context.Context, j *twice.Job[syncArgs]) error {
		started <- j.Args.Tenant
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}), &twice.KindOpts{
		GlobalConcurrency:    2,
		KeyConcurrency:       1,
		KeyOrderSkipsRetries: true,
		ConcurrencyKey:       "tenant",
		// An hour long, so the starts stay in the window however slow
		// the machine.
		RateLimit: twice.RateLimit{Limit: 100, Period: time.Hour},
	})
	client, err := twice.NewClient(store, twice.Config{Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"acme", "acme", "acme", "globex"} {
		if _, err := client.Enqueue(t.Context(), syncArgs{Tenant: tenant}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := client.Start(context.WithoutCancel(t.Context())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(release)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := client.Stop(ctx); err != nil {
			t.Errorf("stop the worker: %v", err)
		}
	})
	got := map[string]bool{}
	timeout := time.After(30 * time.Second)
	for len(got) < 2 {
		select {
		case tenant := <-started:
			got[tenant] = true
		case <-timeout:
			t.Fatalf("the limited jobs did not start in 30s; started: %v", got)
		}
	}
	return reg
}
