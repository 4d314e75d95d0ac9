package twice_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicesqlite"
)

// A limit changed at runtime, without a deploy: the override replaces the
// compiled limit on every worker, the history says who changed it and
// why, and a reset goes back. A typo in the kind is refused.
func ExampleClient_LimitSet() {
	dir, _ := os.MkdirTemp("", "twice-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	store, err := twicesqlite.Open(ctx, filepath.Join(dir, "twice.db"))
	if err != nil {
		panic(err)
	}
	defer store.Close()

	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[ProviderCall](func(context.Context, *twice.Job[ProviderCall]) error {
		return nil
	}), &twice.KindOpts{GlobalConcurrency: 10, KeyConcurrency: 1, ConcurrencyKey: "tenant"})
	client, err := twice.NewClient(store, twice.Config{Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	three := 3
	res, err := client.LimitSet(ctx, &twice.LimitSetParams{Kind: "provider.call.v1", Global: &three,
		By: "ops@example.com", Reason: "the provider throttles us"})
	if err != nil {
		panic(err)
	}
	fmt.Println("now:", res.Override.Text(res.Override.Scope))

	usage, _ := client.LimitList(ctx)
	fmt.Printf("in force: global %d (compiled %d), set by %s\n", usage[0].Limit.Global, usage[0].Compiled.Global, usage[0].Override.By)

	_, err = client.LimitSet(ctx, &twice.LimitSetParams{Kind: "provider.cal.v1", Global: &three})
	fmt.Println("typo refused:", errors.Is(err, twice.ErrUnknownKind))

	if _, err := client.LimitReset(ctx, &twice.LimitResetParams{Kind: "provider.call.v1", Reason: "provider fixed"}); err != nil {
		panic(err)
	}
	history, _ := client.LimitHistory(ctx, nil)
	for _, c := range history.Changes {
		fmt.Printf("%s: %q\n", c.By, c.Reason)
	}
	// Output:
	// now: global 3, per key 1
	// in force: global 3 (compiled 10), set by ops@example.com
	// typo refused: true
	// api: "provider fixed"
	// ops@example.com: "the provider throttles us"
}
