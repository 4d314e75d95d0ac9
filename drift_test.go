package twice_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
)

// The same kind, drift.order.v1, as four deploys spell its args.
type (
	// driftOrder is the shape the stored jobs were enqueued with.
	driftOrder struct {
		OrderID int64  `json:"order_id"`
		Note    string `json:"note"`
	}
	// driftRenamed renames note to memo: stored jobs carry a key it lacks.
	driftRenamed struct {
		OrderID int64  `json:"order_id"`
		Memo    string `json:"memo"`
	}
	// driftAdded keeps note and adds memo: old jobs decode memo as "".
	driftAdded struct {
		OrderID int64  `json:"order_id"`
		Note    string `json:"note"`
		Memo    string `json:"memo"`
	}
	// driftRetyped makes order_id a string: stored numbers do not decode.
	driftRetyped struct {
		OrderID string `json:"order_id"`
		Note    string `json:"note"`
	}
)

func (driftOrder) Kind() string   { return "drift.order.v1" }
func (driftRenamed) Kind() string { return "drift.order.v1" }
func (driftAdded) Kind() string   { return "drift.order.v1" }
func (driftRetyped) Kind() string { return "drift.order.v1" }

// driftRegistry registers T as drift.order.v1 with a handler that is
// never meant to run, and opts.
func driftRegistry[T twice.Args](t *testing.T, opts *twice.KindOpts) *twice.Registry {
	t.Helper()
	reg := twice.NewRegistry()
	if err := twice.Register(reg, twice.HandlerFunc[T](func(context.Context, *twice.Job[T]) error { return nil }), opts); err != nil {
		t.Fatal(err)
	}
	return reg
}

// enqueueOrders stores n drift.order.v1 jobs in driftOrder's shape, due
// in an hour so that no worker a test starts runs them.
func enqueueOrders(t *testing.T, store twicestore.Store, n int) {
	t.Helper()
	c, err := twice.NewClient(store, testConfig(driftRegistry[driftOrder](t, nil)))
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := c.Enqueue(t.Context(), driftOrder{OrderID: int64(i + 1), Note: "gift"}, &twice.EnqueueOpts{RunAt: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
}

// driftClient returns a client, not started, for reg with a log in buf.
func driftClient(t *testing.T, store twicestore.Store, reg *twice.Registry, node string, buf *syncBuffer) *twice.Client {
	t.Helper()
	cfg := testConfig(reg)
	cfg.NodeID = node
	if buf != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	c, err := twice.NewClient(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c
}

// startLive starts c and waits for its first node heartbeat, after which
// the drift guard counts it as a live worker.
func startLive(t *testing.T, store twicestore.Store, c *twice.Client) {
	t.Helper()
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitfor.Cond(t, "node "+c.NodeID()+" listed", func() bool {
		nodes, err := store.NodeList(t.Context(), &twicestore.NodeListParams{AliveSince: time.Now().Add(-time.Minute)})
		for _, n := range nodes {
			if err == nil && n.ID == c.NodeID() {
				return true
			}
		}
		return false
	}, nil)
}

func TestDriftStartGuard(t *testing.T) {
	t.Parallel()
	for name, open := range stepStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			t.Run("renamed field while jobs wait refuses the start", func(t *testing.T) {
				t.Parallel()
				store := open(t)
				enqueueOrders(t, store, 3)
				err := driftClient(t, store, driftRegistry[driftRenamed](t, nil), "new", nil).Start(t.Context())
				if !errors.Is(err, twice.ErrArgsIncompatible) {
					t.Fatalf("Start: %v, want ErrArgsIncompatible", err)
				}
				for _, want := range []string{`"drift.order.v1"`, `field "note" was removed or renamed`, "3 waiting jobs carry it", `"drift.order.v2"`, "ArgsChangeAllowed"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("Start's error %q does not say %q", err, want)
					}
				}
			})

			t.Run("changed JSON type while jobs wait refuses the start", func(t *testing.T) {
				t.Parallel()
				store := open(t)
				enqueueOrders(t, store, 2)
				err := driftClient(t, store, driftRegistry[driftRetyped](t, nil), "new", nil).Start(t.Context())
				if !errors.Is(err, twice.ErrArgsIncompatible) || !strings.Contains(err.Error(), `field "order_id" changed type from integer to string, but 2 waiting jobs carry it`) {
					t.Fatalf("Start: %v, want the type change of order_id over 2 jobs", err)
				}
			})

			t.Run("added field starts with an info line", func(t *testing.T) {
				t.Parallel()
				store := open(t)
				enqueueOrders(t, store, 3)
				old := driftClient(t, store, driftRegistry[driftOrder](t, nil), "old", nil)
				if err := old.Start(t.Context()); err != nil {
					t.Fatal(err)
				}
				var log syncBuffer
				if err := driftClient(t, store, driftRegistry[driftAdded](t, nil), "new", &log).Start(t.Context()); err != nil {
					t.Fatalf("Start with an added field: %v", err)
				}
				if !strings.Contains(log.String(), "level=INFO") || !strings.Contains(log.String(), `field \"memo\" was added`) {
					t.Errorf("no info line about the added field in the log:\n%s", log.String())
				}
			})

			t.Run("opt-in starts with a warning", func(t *testing.T) {
				t.Parallel()
				store := open(t)
				enqueueOrders(t, store, 3)
				var log syncBuffer
				reg := driftRegistry[driftRenamed](t, &twice.KindOpts{ArgsChangeAllowed: "notes were moved to memo by migration 42"})
				if err := driftClient(t, store, reg, "new", &log).Start(t.Context()); err != nil {
					t.Fatalf("Start with ArgsChangeAllowed: %v", err)
				}
				for _, want := range []string{"level=WARN", "notes were moved to memo by migration 42", `field \"note\" was removed or renamed`} {
					if !strings.Contains(log.String(), want) {
						t.Errorf("the log does not say %q:\n%s", want, log.String())
					}
				}
			})

			t.Run("live worker with the old field refuses the start", func(t *testing.T) {
				t.Parallel()
				store := open(t)
				startLive(t, store, driftClient(t, store, driftRegistry[driftOrder](t, nil), "old", nil))
				err := driftClient(t, store, driftRegistry[driftRenamed](t, nil), "new", nil).Start(t.Context())
				if !errors.Is(err, twice.ErrArgsIncompatible) || !strings.Contains(err.Error(), `field "note" was removed or renamed, but live worker "old" publishes it`) {
					t.Fatalf("Start: %v, want the live worker named", err)
				}
			})

			t.Run("same node restarting is compared with its jobs only", func(t *testing.T) {
				t.Parallel()
				store := open(t)
				old := driftClient(t, store, driftRegistry[driftOrder](t, nil), "node-1", nil)
				if err := old.Start(t.Context()); err != nil {
					t.Fatal(err)
				}
				if err := old.Stop(t.Context()); err != nil {
					t.Fatal(err)
				}
				if err := driftClient(t, store, driftRegistry[driftRenamed](t, nil), "node-1", nil).Start(t.Context()); err != nil {
					t.Fatalf("Start of the same node with no job waiting: %v", err)
				}
			})

			t.Run("another node that stopped cleanly is no live worker", func(t *testing.T) {
				t.Parallel()
				store := open(t)
				old := driftClient(t, store, driftRegistry[driftOrder](t, nil), "old", nil)
				if err := old.Start(t.Context()); err != nil {
					t.Fatal(err)
				}
				if err := old.Stop(t.Context()); err != nil {
					t.Fatal(err)
				}
				var log syncBuffer
				if err := driftClient(t, store, driftRegistry[driftRenamed](t, nil), "new", &log).Start(t.Context()); err != nil {
					t.Fatalf("Start after the old node stopped, no job waiting: %v", err)
				}
				if !strings.Contains(log.String(), `field \"note\" was removed or renamed`) || !strings.Contains(log.String(), "level=INFO") {
					t.Errorf("no info line about the removed field:\n%s", log.String())
				}
			})

			t.Run("store error logs and starts", func(t *testing.T) {
				t.Parallel()
				store := open(t)
				var log syncBuffer
				c := driftClient(t, failingCatalog{store}, driftRegistry[driftRenamed](t, nil), "new", &log)
				if err := c.Start(t.Context()); err != nil {
					t.Fatalf("Start with an unreadable catalog: %v", err)
				}
				if !strings.Contains(log.String(), "level=ERROR") || !strings.Contains(log.String(), "catalog unavailable") {
					t.Errorf("the log does not show the failed check:\n%s", log.String())
				}
			})
		})
	}
}

// failingCatalog is a store whose catalog cannot be read.
type failingCatalog struct{ twicestore.Store }

func (failingCatalog) CatalogList(context.Context, *twicestore.CatalogListParams) (*twicestore.CatalogListResult, error) {
	return nil, errors.New("catalog unavailable")
}

func TestCheckArgsReport(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	reg := driftRegistry[driftAdded](t, nil)
	c := driftClient(t, store, reg, "ci", nil)

	rep, err := c.CheckArgs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Kinds) != 1 || rep.Kinds[0].Verdict != twice.ArgsNew || rep.Err() != nil {
		t.Fatalf("empty store: %+v, want one new kind", rep.Kinds)
	}

	enqueueOrders(t, store, 2)
	rep, err = c.CheckArgs(t.Context(), "drift.order.v1")
	if err != nil {
		t.Fatal(err)
	}
	if k := rep.Kinds[0]; k.Verdict != twice.ArgsCompatible || k.JobsScanned != 2 || len(k.Changes) != 1 ||
		k.Changes[0] != (twice.ArgsChange{Field: "memo", Change: "added", Now: "string", Compatible: true}) {
		t.Errorf("jobs missing an added field: %+v, want memo added over 2 jobs", k)
	}

	if _, err := c.CheckArgs(t.Context(), "drift.nope.v1"); !errors.Is(err, twice.ErrInvalidInput) {
		t.Errorf("CheckArgs of an unregistered kind: %v, want ErrInvalidInput", err)
	}
}
