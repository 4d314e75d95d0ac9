package twiceweb_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicetype"
	"github.com/twicejobs/twice/twiceweb"
)

// invoiceArgs is a stepped job that records output and enqueues a
// continuation, for the job page's composition.
type invoiceArgs struct{ N int }

func (invoiceArgs) Kind() string { return "web.invoice.v1" }

// composedJob registers web.invoice.v1 on e, starts a worker and runs one
// invoice in a batch (with an okArgs callback) to completion: it uploads
// in a step, records its output and enqueues okArgs{N: 99} with its
// completion. It returns the invoice's job and batch ids.
func composedJob(t *testing.T, e *env) (job, batch int64) {
	t.Helper()
	twice.MustRegister(e.reg, twice.HandlerFunc[invoiceArgs](func(ctx context.Context, j *twice.Job[invoiceArgs]) error {
		url, err := twice.Step(ctx, "upload", twice.ClaimAfter, func(context.Context) (string, error) {
			return fmt.Sprintf("s3://invoices/%d.pdf", j.Args.N), nil
		})
		if err != nil {
			return err
		}
		if err := j.Then(okArgs{N: 99}, nil); err != nil {
			return err
		}
		return twice.RecordOutput(ctx, map[string]string{"pdf": url})
	}), &twice.KindOpts{Strategy: twice.None})
	e.start()
	res, err := e.client.EnqueueBatch(t.Context(), twice.NewBatch(okArgs{N: 98}, nil).Add(invoiceArgs{N: 7}, nil))
	if err != nil {
		t.Fatal(err)
	}
	job = res.Jobs[0].Job.ID
	e.await("the invoice to complete", func() bool { return e.state(job) == twicetype.JobStateCompleted })
	return job, res.Batch.ID
}

// TestJobPageShowsComposition: the job page shows the output, the steps
// with their status, the batch with its counters and a link to its page,
// and the jobs its completion inserted (the batch's callback and its
// continuation); the batch page answers.
func TestJobPageShowsComposition(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	job, batch := composedJob(t, e)
	srv := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)
	status, body := b.get("/jobs/" + strconv.FormatInt(job, 10))
	if status != http.StatusOK {
		t.Fatalf("job page: %d\n%s", status, body)
	}
	for _, want := range []string{
		`<section id="output">`, `{&#34;pdf&#34;:&#34;s3://invoices/7.pdf&#34;}`,
		`<section id="steps">`, `data-step-status="upload">done</span>`, `&#34;s3://invoices/7.pdf&#34;`,
		fmt.Sprintf(`<a href="/batches/%d" id="batch-link">batch %d</a>`, batch, batch), "1 of 1 completed, 0 pending, 0 dead, 0 cancelled",
		`<section id="children">`, "<code>web.ok.v1</code>", fmt.Sprintf(`<tr data-child="%d">`, job+1), fmt.Sprintf(`<tr data-child="%d">`, job+2),
	} {
		if !strings.Contains(body, want) {
			t.Errorf("job page lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, `<section id="workflow">`) {
		t.Error("job page shows a workflow for a job in none")
	}
	status, body = b.get(fmt.Sprintf("/batches/%d", batch))
	if status != http.StatusOK || !strings.Contains(body, fmt.Sprintf(`data-batch-state="%d">completed<`, batch)) {
		t.Errorf("batch page: %d, want 200 with the completed batch:\n%s", status, body)
	}
	for path, want := range map[string]int{"/batches/999999": 404, "/batches/x": 400} {
		if status, _ := b.get(path); status != want {
			t.Errorf("GET %s: %d, want %d", path, status, want)
		}
	}
}

// TestJobsPageSearch: the jobs page filters by correlation id and
// metadata pairs, keeps them in its form and its links, and refuses a
// pair that is not key=value.
func TestJobsPageSearch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b2, c := searchJobs(t, e)
	srv := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)
	rows := func(body string) []string {
		var ids []string
		for _, part := range strings.Split(body, `<tr data-job="`)[1:] {
			ids = append(ids, part[:strings.Index(part, `"`)])
		}
		return ids
	}
	for q, want := range map[string][]int64{
		"correlation_id=req-1":                      {b2, a},
		"meta=tenant%3Dacme":                        {b2, a},
		"meta=tenant%3Dacme&meta=region%3Deu":       {a},
		"correlation_id=req-2&meta=region%3Deu":     {c},
		"correlation_id=req-1&meta=tenant%3Dglobex": nil,
	} {
		status, body := b.get("/jobs?" + q)
		var wantIDs []string
		for _, id := range want {
			wantIDs = append(wantIDs, strconv.FormatInt(id, 10))
		}
		if got := rows(body); status != http.StatusOK || strings.Join(got, ",") != strings.Join(wantIDs, ",") {
			t.Errorf("GET /jobs?%s: %d, rows %v, want %v", q, status, got, wantIDs)
		}
	}
	_, body := b.get("/jobs?correlation_id=req-1&meta=tenant%3Dacme")
	for _, want := range []string{`name="correlation_id" id="filter-correlation-id" value="req-1"`, `name="meta" value="tenant=acme"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the filter form does not keep %q:\n%s", want, body)
		}
	}
	if status, body := b.get("/jobs?meta=tenant"); status != http.StatusBadRequest || !strings.Contains(body, "give key=value") {
		t.Errorf("GET /jobs?meta=tenant: %d, want 400 saying key=value:\n%s", status, body)
	}
}

// searchJobs enqueues three scheduled jobs: a (req-1, tenant acme, region
// eu), b (req-1, tenant acme), c (req-2, tenant globex, region eu).
func searchJobs(t *testing.T, e *env) (a, b, c int64) {
	t.Helper()
	client, err := twice.NewClient(e.store, twice.Config{Registry: e.reg})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for i, o := range []struct {
		corr string
		md   map[string]string
	}{
		{"req-1", map[string]string{"tenant": "acme", "region": "eu"}},
		{"req-1", map[string]string{"tenant": "acme"}},
		{"req-2", map[string]string{"tenant": "globex", "region": "eu"}},
	} {
		res, err := client.Enqueue(t.Context(), okArgs{N: i}, &twice.EnqueueOpts{CorrelationID: o.corr, Metadata: o.md})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Job.ID)
	}
	return ids[0], ids[1], ids[2]
}

func TestAPIJobSearchAndDetail(t *testing.T) {
	t.Parallel()
	testAPIJobSearchAndDetail(t, newEnv(t))
}

func TestPostgresAPIJobSearchAndDetail(t *testing.T) {
	t.Parallel()
	testAPIJobSearchAndDetail(t, newPostgresEnv(t))
}

// testAPIJobSearchAndDetail: GET /api/v1/jobs takes correlation_id and
// meta (repeated, all must match) and refuses a pair that is not
// key=value; GET /api/v1/jobs/{id} carries output, steps, batch and
// children.
func testAPIJobSearchAndDetail(t *testing.T, e *env) {
	a, b, c := searchJobs(t, e)
	api := newAPIEnvOn(t, e, twiceweb.Options{})
	ids := func(r apiResp) []int64 {
		var out []int64
		jobs, _ := r.body["jobs"].([]any)
		for _, j := range jobs {
			out = append(out, int64(j.(map[string]any)["id"].(float64)))
		}
		return out
	}
	for q, want := range map[string][]int64{
		"correlation_id=req-1":                  {b, a},
		"meta=tenant=acme":                      {b, a},
		"meta=tenant=acme&meta=region=eu":       {a},
		"correlation_id=req-2&meta=region%3Deu": {c},
		"meta=tenant=acme&state=dead":           nil,
	} {
		if got := ids(api.call("GET", "/jobs?"+q, apiToken, "").want(t, http.StatusOK)); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("GET /jobs?%s = %v, want %v", q, got, want)
		}
	}
	for q, status := range map[string]int{
		"meta=tenant":                                400,
		"meta=%3Dacme":                               400,
		"meta=tenant=acme&meta=tenant=x":             400,
		"correlation_id=a&correlation_id=b":          400,
		"correlation_id=a%00b":                       400,
		"correlation_id=" + strings.Repeat("x", 600): 422,
	} {
		api.call("GET", "/jobs?"+q, apiToken, "").want(t, status)
	}

	job, batch := composedJob(t, e)
	r := api.call("GET", "/jobs/"+strconv.FormatInt(job, 10), apiToken, "").want(t, http.StatusOK)
	out, _ := r.body["output"].(map[string]any)
	steps, _ := r.body["steps"].([]any)
	bt, _ := r.body["batch"].(map[string]any)
	kids, _ := r.body["children"].([]any)
	if out["pdf"] != "s3://invoices/7.pdf" || len(steps) != 1 || steps[0].(map[string]any)["status"] != "done" ||
		steps[0].(map[string]any)["receipt"] != "s3://invoices/7.pdf" ||
		bt["id"] != float64(batch) || bt["completed"] != float64(1) || bt["total"] != float64(1) ||
		len(kids) != 2 || kids[0].(map[string]any)["id"] != bt["callback_job_id"] || kids[1].(map[string]any)["kind"] != "web.ok.v1" ||
		r.body["kind"] != "web.invoice.v1" {
		t.Errorf("GET /jobs/%d = %s, want its output, step, batch, and the batch's callback and its continuation as children", job, r.raw)
	}
	// A plain job: empty lists, no output, batch or workflow.
	r = api.call("GET", "/jobs/"+strconv.FormatInt(a, 10), apiToken, "").want(t, http.StatusOK)
	if !strings.Contains(r.raw, `"steps":[]`) || !strings.Contains(r.raw, `"children":[]`) ||
		r.body["output"] != nil || r.body["batch"] != nil || r.body["workflow"] != nil {
		t.Errorf("GET /jobs/%d of a plain job = %s", a, r.raw)
	}
}
