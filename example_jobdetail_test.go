package twice_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twicejobs/twice"
)

// RenderInvoice is a batch's job in the JobDetail example; InvoicesDone is
// the batch's callback.
type RenderInvoice struct{ Invoice int }

func (RenderInvoice) Kind() string { return "invoice.render.v1" }

type InvoicesDone struct{ Run int }

func (InvoicesDone) Kind() string { return "invoice.done.v1" }

// JobDetail shows what a job produced and what it belongs to in one call:
// its recorded output, its named steps with their receipts' status, its
// batch with the batch's counters, and the jobs its completion inserted
// (here the batch's callback, which the last job's completion enqueued).
func ExampleClient_JobDetail() {
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[RenderInvoice](func(ctx context.Context, job *twice.Job[RenderInvoice]) error {
		url, err := twice.Step(ctx, "upload", twice.ClaimAfter, func(context.Context) (string, error) {
			return fmt.Sprintf("s3://invoices/%d.pdf", job.Args.Invoice), nil
		})
		if err != nil {
			return err
		}
		return twice.RecordOutput(ctx, map[string]string{"pdf": url})
	}), &twice.KindOpts{Strategy: twice.None})
	twice.MustRegister(reg, twice.HandlerFunc[InvoicesDone](func(context.Context, *twice.Job[InvoicesDone]) error { return nil }), nil)
	client, stop := exampleClient(reg)
	defer stop()
	ctx := context.Background()

	res, err := client.EnqueueBatch(ctx, twice.NewBatch(InvoicesDone{Run: 1}, nil).Add(RenderInvoice{Invoice: 7}, nil))
	if err != nil {
		panic(err)
	}
	id := res.Jobs[0].Job.ID
	if _, err := client.Wait(ctx, id); err != nil {
		panic(err)
	}
	d, err := client.JobDetail(ctx, id)
	if err != nil {
		panic(err)
	}
	fmt.Println("output:", string(d.Output))
	for _, s := range d.Steps {
		fmt.Printf("step %s: %s, receipt %s\n", s.Step.Step, s.Status, s.Receipt)
	}
	fmt.Printf("batch: %d of %d completed\n", d.Batch.Completed, d.Batch.Total)
	for _, c := range d.Children {
		fmt.Println("inserted:", c.Kind)
	}
	// Output:
	// output: {"pdf":"s3://invoices/7.pdf"}
	// step upload: done, receipt "s3://invoices/7.pdf"
	// batch: 1 of 1 completed
	// inserted: invoice.done.v1
}

// SyncContact is a job's args in the JobList search example.
type SyncContact struct{ Contact int }

func (SyncContact) Kind() string { return "crm.contact-sync.v1" }

// A listing (and a bulk action: JobCancel, JobRetry, JobDelete) finds the
// jobs one request enqueued by its correlation id, or those carrying
// metadata pairs: every pair given must match. ParseMetadataPairs reads
// pairs written key=value, as the CLI's --meta takes them.
func ExampleClient_JobList_search() {
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[SyncContact](func(context.Context, *twice.Job[SyncContact]) error { return nil }), nil)
	client, stop := exampleClient(reg) // started: jobs are enqueued for later, so nothing runs
	defer stop()
	ctx := context.Background()

	for i, tenant := range []string{"acme", "acme", "globex"} {
		if _, err := client.Enqueue(ctx, SyncContact{Contact: i}, &twice.EnqueueOpts{
			Delay: 24 * time.Hour, CorrelationID: "req-42", Metadata: map[string]string{"tenant": tenant},
		}); err != nil {
			panic(err)
		}
	}
	byRequest, _ := client.JobList(ctx, &twice.JobListParams{JobFilter: twice.JobFilter{CorrelationID: "req-42"}})
	md, err := twice.ParseMetadataPairs([]string{"tenant=acme"}) // as --meta tenant=acme says it
	if err != nil {
		panic(err)
	}
	byTenant, _ := client.JobList(ctx, &twice.JobListParams{JobFilter: twice.JobFilter{Metadata: md}})
	fmt.Println(len(byRequest.Jobs), "jobs of request req-42,", len(byTenant.Jobs), "of tenant acme")

	_, err = twice.ParseMetadataPairs([]string{"tenant"})
	fmt.Println(err, errors.Is(err, twice.ErrInvalidInput))
	// Output:
	// 3 jobs of request req-42, 2 of tenant acme
	// metadata pair "tenant" has no '=': give key=value, as in tenant=acme true
}
