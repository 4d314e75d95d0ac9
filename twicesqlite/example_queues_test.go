package twicesqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
)

// An operator pauses a queue on every node (here until resumed), sees it
// paused with its waiting job, and resumes it. Applications do this through
// the Client's admin API; the store's methods are what it calls.
func ExampleStore_QueuePause() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "twice-example")
	if err != nil {
		panic(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	s, err := twicesqlite.Open(ctx, filepath.Join(dir, "twice.db"))
	if err != nil {
		panic(err)
	}
	defer func() { _ = s.Close() }()

	now := time.Now()
	if _, err := s.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{
		{Kind: "email.send.v1", Queue: "emails", Args: []byte(`{}`), MaxAttempts: 3, CreatedAt: now},
	}}); err != nil {
		panic(err)
	}
	fetch := func() int {
		res, err := s.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "emails", Kinds: []string{"email.send.v1"},
			Limit: 10, Node: "example", Now: time.Now(), LeaseUntil: time.Now().Add(time.Minute)})
		if err != nil {
			panic(err)
		}
		return len(res.Jobs)
	}

	if err := s.QueuePause(ctx, &twicestore.QueuePauseParams{Queue: "emails", By: "ops", Reason: "provider outage"}); err != nil {
		panic(err)
	}
	fmt.Println("fetched while paused:", fetch())
	list, err := s.QueueList(ctx, &twicestore.QueueListParams{})
	if err != nil {
		panic(err)
	}
	for _, q := range list.Queues {
		fmt.Printf("%s: paused %v by %s (%s), %d due\n", q.Name, q.Paused, q.By, q.Reason, q.Due)
	}
	if _, err := s.QueueResume(ctx, &twicestore.QueueResumeParams{Queue: "emails"}); err != nil {
		panic(err)
	}
	fmt.Println("fetched once resumed:", fetch())
	// Output:
	// fetched while paused: 0
	// emails: paused true by ops (provider outage), 1 due
	// fetched once resumed: 1
}

// Cancelling jobs reports what became of each one: a waiting job is
// cancelled at once, a running one is asked to stop (its worker learns
// within about half a second), and an unknown id is reported, not an error.
func ExampleStore_JobCancel() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "twice-example")
	if err != nil {
		panic(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	s, err := twicesqlite.Open(ctx, filepath.Join(dir, "twice.db"))
	if err != nil {
		panic(err)
	}
	defer func() { _ = s.Close() }()

	now := time.Now()
	job := &twicestore.JobInsertParams{Kind: "report.build.v1", Queue: "default", Args: []byte(`{}`), MaxAttempts: 3, CreatedAt: now}
	ins, err := s.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{job, job}})
	if err != nil {
		panic(err)
	}
	running, waiting := ins.Jobs[0].Job.ID, ins.Jobs[1].Job.ID
	if _, err := s.JobFetch(ctx, &twicestore.JobFetchParams{Queue: "default", Kinds: []string{"report.build.v1"},
		Limit: 1, Node: "worker-1", Now: now, LeaseUntil: now.Add(time.Minute)}); err != nil {
		panic(err)
	}

	res, err := s.JobCancel(ctx, &twicestore.JobCancelParams{
		Filter: twicestore.JobFilter{IDs: []int64{running, waiting, 999}}, By: "ops", Reason: "wrong month"})
	if err != nil {
		panic(err)
	}
	for _, r := range res.Results {
		line := fmt.Sprintf("job %d: %s", r.ID, r.Status)
		if r.State != "" {
			line += " " + string(r.State)
		}
		fmt.Println(line)
	}
	j, err := s.JobGet(ctx, &twicestore.JobGetParams{ID: waiting})
	if err != nil {
		panic(err)
	}
	fmt.Println(j.Note)
	// Output:
	// job 1: cancel_requested running
	// job 2: done cancelled
	// job 999: not_found
	// cancelled by ops: wrong month
}
