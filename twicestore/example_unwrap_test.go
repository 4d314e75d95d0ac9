package twicestore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
)

// countingStore is a store wrapper: it embeds Store to override a method
// or two (here none), so on its own it has only Store's methods.
type countingStore struct {
	twicestore.Store
}

// Unwrap names the wrapped store, so capabilities are found through the
// wrapper.
func (s countingStore) Unwrap() twicestore.Store { return s.Store }

// notifyingStore stands for a driver's store with an optional capability,
// as PostgreSQL's store has ListenInserts.
type notifyingStore struct {
	twicestore.Store
}

func (notifyingStore) ListenInserts(ctx context.Context, _ func(queue string)) error {
	<-ctx.Done()
	return ctx.Err()
}

// A wrapper that embeds Store hides the optional capabilities of the store
// it wraps from a type assertion; with Unwrap, As finds them, as the
// runtime does for LISTEN/NOTIFY.
func ExampleAs() {
	dir, _ := os.MkdirTemp("", "twicestore-example")
	defer func() { _ = os.RemoveAll(dir) }()
	store, err := twicesqlite.Open(context.Background(), filepath.Join(dir, "jobs.db"))
	if err != nil {
		panic(err)
	}
	defer func() { _ = store.Close() }()

	var wrapped twicestore.Store = countingStore{notifyingStore{store}}
	_, asserted := wrapped.(twicestore.InsertListener)
	_, found := twicestore.As[twicestore.InsertListener](wrapped)
	fmt.Println("type assertion:", asserted)
	fmt.Println("As:", found)
	// Output:
	// type assertion: false
	// As: true
}
