package twicepg

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/twicestore"
)

// bulkBenchJobs is how many jobs one cancel of BenchmarkBulkCancel covers.
const bulkBenchJobs = 20_000

// BenchmarkBulkCancel times one call that cancels 20,000 available jobs:
// plain jobs (JobCancel by kind), the jobs of one batch (JobCancel by
// kind), and a workflow of 20,000 root tasks (WorkflowCancel). The batch
// and workflow counters are applied once per statement (migration 017),
// so a batch's cancel costs about what the plain one does; with 016's
// per-row notes it grew with the square of the jobs (80 s for 20,000).
// Each op is one whole cancel: run it with -benchtime 1x (or 3x); it
// needs TWICE_TEST_POSTGRES.
func BenchmarkBulkCancel(b *testing.B) {
	ctx := context.Background()
	base := time.Now().UTC().Truncate(time.Microsecond)
	jobs := func(kind string) []*twicestore.JobInsertParams {
		js := make([]*twicestore.JobInsertParams, bulkBenchJobs)
		for i := range js {
			js[i] = &twicestore.JobInsertParams{Kind: kind, Queue: "default", Args: []byte(`{}`), MaxAttempts: 3,
				RunAt: base, CreatedAt: base}
		}
		return js
	}
	cancelKind := func(s *Store, kind string) error {
		res, err := s.JobCancel(ctx, &twicestore.JobCancelParams{Filter: twicestore.JobFilter{Kind: kind}, Now: base})
		if err == nil && len(res.IDs) != bulkBenchJobs {
			err = fmt.Errorf("cancelled %d jobs, want %d", len(res.IDs), bulkBenchJobs)
		}
		return err
	}
	for _, bc := range []struct {
		name string
		// setup stores the jobs of round r and returns the cancel to time.
		setup func(s *Store, r int) (func() error, error)
	}{
		{"plain", func(s *Store, r int) (func() error, error) {
			kind := fmt.Sprintf("bench.plain%d.v1", r)
			_, err := s.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: jobs(kind)})
			return func() error { return cancelKind(s, kind) }, err
		}},
		{"batch", func(s *Store, r int) (func() error, error) {
			kind := fmt.Sprintf("bench.member%d.v1", r)
			cb := jobs("bench.callback.v1")[0]
			_, err := s.BatchInsert(ctx, &twicestore.BatchInsertParams{Callback: cb, Jobs: jobs(kind), CreatedAt: base})
			return func() error { return cancelKind(s, kind) }, err
		}},
		{"workflow", func(s *Store, r int) (func() error, error) {
			tasks := make([]*twicestore.WorkflowTaskParams, bulkBenchJobs)
			for i, j := range jobs(fmt.Sprintf("bench.task%d.v1", r)) {
				tasks[i] = &twicestore.WorkflowTaskParams{Name: fmt.Sprint("t", i), Job: j}
			}
			w, err := s.WorkflowInsert(ctx, &twicestore.WorkflowInsertParams{Name: "bench", Tasks: tasks, CreatedAt: base})
			if err != nil {
				return nil, err
			}
			return func() error {
				res, err := s.WorkflowCancel(ctx, &twicestore.WorkflowCancelParams{ID: w.Workflow.ID, Now: base})
				if err == nil && len(res.Jobs.IDs) != bulkBenchJobs {
					err = fmt.Errorf("cancelled %d jobs, want %d", len(res.Jobs.IDs), bulkBenchJobs)
				}
				return err
			}, nil
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			url, _ := pgtest.Schema(b, "bench_cancel")
			s, err := Open(ctx, url)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			for r := 0; b.Loop(); r++ {
				b.StopTimer()
				cancel, err := bc.setup(s, r)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := cancel(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
