package twice_test

import (
	"context"
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
