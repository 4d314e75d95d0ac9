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

// SearchReindex rebuilds a customer's search index; Reason is only for
// the log.
type SearchReindex struct {
	CustomerID int64  `json:"customer_id"`
	Reason     string `json:"reason"`
}

func (SearchReindex) Kind() string { return "search.reindex.v1" }

// A debounce: one reindex waits per customer, whatever the reason, and each
// new enqueue pushes it back and replaces its args, so a burst of edits
// makes one reindex after the last of them.
func ExampleUniqueOpts() {
	dir, _ := os.MkdirTemp("", "twice-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	store, err := twicesqlite.Open(ctx, filepath.Join(dir, "twice.db"))
	if err != nil {
		panic(err)
	}
	defer store.Close()

	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[SearchReindex](func(_ context.Context, _ *twice.Job[SearchReindex]) error {
		return nil
	}), &twice.KindOpts{Unique: &twice.UniqueOpts{
		ArgsFields: []string{"customer_id"},
		OnConflict: twice.OnConflictReplace,
	}})
	client, err := twice.NewClient(store, twice.Config{Registry: reg})
	if err != nil {
		panic(err)
	}
	for _, reason := range []string{"name edited", "address edited", "logo edited"} {
		res, err := client.Enqueue(ctx, SearchReindex{CustomerID: 42, Reason: reason},
			&twice.EnqueueOpts{Delay: 30 * time.Second})
		if err != nil {
			panic(err)
		}
		fmt.Printf("job %d: duplicate %v, replaced %v, args %s\n", res.Job.ID, res.Duplicate, res.Replaced, res.Job.Args)
	}
	// Output:
	// job 1: duplicate false, replaced false, args {"customer_id":42,"reason":"name edited"}
	// job 1: duplicate true, replaced true, args {"customer_id":42,"reason":"address edited"}
	// job 1: duplicate true, replaced true, args {"customer_id":42,"reason":"logo edited"}
}
