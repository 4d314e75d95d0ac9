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

// A wrapper that embeds Store hides the optional capabilities of the store
// it wraps from a type assertion; with Unwrap, As finds them, as the
// runtime does for LISTEN/NOTIFY and fetch peeks.
func ExampleAs() {
	dir, _ := os.MkdirTemp("", "twicestore-example")
	defer func() { _ = os.RemoveAll(dir) }()
	store, err := twicesqlite.Open(context.Background(), filepath.Join(dir, "jobs.db"))
	if err != nil {
		panic(err)
	}
	defer func() { _ = store.Close() }()

	var wrapped twicestore.Store = countingStore{store}
	_, asserted := wrapped.(twicestore.MarkerBatchPeeker)
	_, found := twicestore.As[twicestore.MarkerBatchPeeker](wrapped)
	fmt.Println("type assertion:", asserted)
	fmt.Println("As:", found)
	// Output:
	// type assertion: false
	// As: true
}
