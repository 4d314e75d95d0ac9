package twice_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicesqlite"
)

// ProviderCall calls a rate-limited provider on behalf of a tenant.
type ProviderCall struct {
	Tenant string `json:"tenant"`
}

func (ProviderCall) Kind() string { return "provider.call.v1" }

// Flow control across every node: at most 10 calls at once, one at a
// time per tenant in enqueue order, and 100 starts a second. LimitList
// shows the jobs that wait for a slot as throttled.
func ExampleClient_LimitList() {
	dir, _ := os.MkdirTemp("", "twice-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	store, err := twicesqlite.Open(ctx, filepath.Join(dir, "twice.db"))
	if err != nil {
		panic(err)
	}
	defer store.Close()

	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[ProviderCall](func(_ context.Context, _ *twice.Job[ProviderCall]) error {
		return nil
	}), &twice.KindOpts{
		GlobalConcurrency: 10,
		KeyConcurrency:    1,
		ConcurrencyKey:    "tenant",
		RateLimit:         twice.RateLimit{Limit: 100, Period: time.Second},
	})
	client, err := twice.NewClient(store, twice.Config{Registry: reg})
	if err != nil {
		panic(err)
	}
	for _, tenant := range []string{"acme", "acme", "acme", "globex"} {
		if _, err := client.Enqueue(ctx, ProviderCall{Tenant: tenant}, nil); err != nil {
			panic(err)
		}
	}
	usage, err := client.LimitList(ctx)
	if err != nil {
		panic(err)
	}
	for _, u := range usage {
		fmt.Printf("%s: %d running of %d, %d due, %d throttled, %d tenants\n",
			u.Kind, u.Running, u.Limit.Global, u.Due, u.Throttled, u.Keys)
	}
	// Output: provider.call.v1: 0 running of 10, 4 due, 2 throttled, 2 tenants
}

// WebhookDelivery delivers one event to a tenant's endpoint.
type WebhookDelivery struct {
	Tenant string `json:"tenant"`
	Event  int    `json:"event"`
}

func (WebhookDelivery) Kind() string { return "webhook.delivery.v1" }

// One delivery at a time per tenant, but a delivery waiting for its retry
// does not stall the tenant's next events: KeyOrderSkipsRetries lets them
// start meanwhile. The limit of one per tenant still holds.
func ExampleKindOpts_keyOrderSkipsRetries() {
	dir, _ := os.MkdirTemp("", "twice-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	store, err := twicesqlite.Open(ctx, filepath.Join(dir, "twice.db"))
	if err != nil {
		panic(err)
	}
	defer store.Close()

	ran := make(chan string)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[WebhookDelivery](func(_ context.Context, job *twice.Job[WebhookDelivery]) error {
		if job.Args.Event == 1 {
			ran <- fmt.Sprintf("event 1 failed (attempt %d), retry in an hour", job.Attempt)
			return errors.New("endpoint down")
		}
		ran <- fmt.Sprintf("event %d delivered", job.Args.Event)
		return nil
	}), &twice.KindOpts{
		KeyConcurrency:       1,
		ConcurrencyKey:       "tenant",
		KeyOrderSkipsRetries: true,
	})
	client, err := twice.NewClient(store, twice.Config{Registry: reg,
		Backoff: func(int) time.Duration { return time.Hour }})
	if err != nil {
		panic(err)
	}
	for event := 1; event <= 3; event++ {
		if _, err := client.Enqueue(ctx, WebhookDelivery{Tenant: "acme", Event: event}, nil); err != nil {
			panic(err)
		}
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	for range 3 {
		fmt.Println(<-ran)
	}
	if err := client.Shutdown(ctx, 10*time.Second); err != nil {
		panic(err)
	}
	// Output:
	// event 1 failed (attempt 1), retry in an hour
	// event 2 delivered
	// event 3 delivered
}
