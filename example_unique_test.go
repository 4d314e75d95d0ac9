package twice_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicetype"
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

// DailyDigest mails a team its daily digest.
type DailyDigest struct {
	Team string `json:"team"`
}

func (DailyDigest) Kind() string { return "digest.daily.v1" }

// Once a day, even after it ran: the key is the team and the day the run
// time falls in, and a completed digest keeps holding it (completed is
// among ByStates), so a second enqueue the same day is a duplicate of the
// digest already sent, while the next day's makes a new job. The key is
// freed early if retention deletes the completed job first: keep
// CompletedRetention at least a day.
func ExampleUniqueOpts_byStates() {
	ran := make(chan string)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[DailyDigest](func(_ context.Context, job *twice.Job[DailyDigest]) error {
		ran <- job.Args.Team
		return nil
	}), &twice.KindOpts{Unique: &twice.UniqueOpts{
		ByArgs:   true,
		ByPeriod: 24 * time.Hour,
		ByStates: []twicetype.JobState{twicetype.JobStateAvailable, twicetype.JobStateRunning, twicetype.JobStateCompleted},
	}})
	dir, _ := os.MkdirTemp("", "twice-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	store, err := twicesqlite.Open(ctx, filepath.Join(dir, "twice.db"))
	if err != nil {
		panic(err)
	}
	defer store.Close()
	client, err := twice.NewClient(store, twice.Config{Registry: reg})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	var first int64
	enqueue := func(when string, at time.Time) {
		res, err := client.Enqueue(ctx, DailyDigest{Team: "ops"}, &twice.EnqueueOpts{RunAt: at})
		if err != nil {
			panic(err)
		}
		if first == 0 {
			first = res.Job.ID
		}
		fmt.Printf("%s: duplicate %v, the first job %v, %s\n", when, res.Duplicate, res.Job.ID == first, res.Job.State)
	}

	today := time.Now().UTC().Truncate(24 * time.Hour)
	enqueue("today", today)
	fmt.Println("sent the digest to", <-ran)
	// Shutdown returns once the completion is written.
	if err := client.Shutdown(ctx, 10*time.Second); err != nil {
		panic(err)
	}
	enqueue("today again", today.Add(12*time.Hour))
	enqueue("tomorrow", today.Add(24*time.Hour))
	// Output:
	// today: duplicate false, the first job true, available
	// sent the digest to ops
	// today again: duplicate true, the first job true, completed
	// tomorrow: duplicate false, the first job false, available
}
