package twice_test

import (
	"context"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

type invoiceArgs struct{ N int }

func (invoiceArgs) Kind() string { return "catalog.invoice.v1" }

// TestCatalogHandlerName: a worker registers a ClaimAfter kind under the
// handler name "billing" and completes a job of it, with a step; a client
// built without the kind (the stock CLI's and dashboard's) reads the
// handler name from the catalog, so it previews a replay of the job as a
// no-op (its marker is under billing) and lists the job's steps.
func TestCatalogHandlerName(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, store twicestore.Store) {
		ctx := context.Background()
		reg := twice.NewRegistry()
		twice.MustRegister(reg, twice.HandlerFunc[invoiceArgs](func(ctx context.Context, _ *twice.Job[invoiceArgs]) error {
			_, err := twice.Step(ctx, "send", twice.ClaimAfter, func(context.Context) (string, error) { return "sent-1", nil })
			return err
		}), &twice.KindOpts{HandlerName: "billing"})
		worker := startClient(t, store, testConfig(reg))
		job := mustEnqueue(t, worker, invoiceArgs{N: 1}, nil)
		waitJob(t, store, job.ID, "completed", isState(twicetype.JobStateCompleted))
		if !markerProcessed(t, store, "billing", job.Key) {
			t.Fatal("the worker left no marker under billing")
		}

		stock, err := twice.NewClient(store, twice.Config{})
		if err != nil {
			t.Fatal(err)
		}
		cat, err := stock.Catalog(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(cat) != 1 || cat[0].HandlerName != "billing" || cat[0].Registered {
			t.Fatalf("stock client's catalog = %+v, want the worker's kind with handler name billing", cat)
		}
		pv, err := stock.JobRetryPreview(ctx, &twice.JobActionParams{IDs: []int64{job.ID},
			Filter: &twice.JobFilter{State: twicetype.JobStateCompleted}})
		if err != nil {
			t.Fatal(err)
		}
		if pv.Total != 1 || pv.Counts[twice.ReplayNoop] != 1 {
			t.Errorf("stock client's preview = %+v, want the job a no-op: its marker is under billing", pv)
		}
		d, err := stock.JobDetail(ctx, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if d.Handler != "billing" || len(d.Steps) != 1 || d.Steps[0].Step.Step != "send" || d.Steps[0].Status != twice.StepDone {
			t.Errorf("stock client's detail: handler %q, steps %+v; want step send done under billing", d.Handler, d.Steps)
		}
	})
}
