package twiceweb_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twiceweb"
)

// TestWorkflowPages: the list shows a workflow, its page shows the graph
// level by level with each task's state; a missing id is a 404 and a bad
// one a 400.
func TestWorkflowPages(t *testing.T) {
	e := newEnv(t)
	c, err := twice.NewClient(e.store, twice.Config{Registry: e.reg})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.EnqueueWorkflow(t.Context(), twice.NewWorkflow("nightly import").
		Add("fetch", okArgs{N: 1}, nil).Add("load", okArgs{N: 2}, nil, "fetch").Add("report", okArgs{N: 3}, nil, "load"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)

	code, body := b.get("/workflows")
	if code != http.StatusOK || !strings.Contains(body, "nightly import") || !strings.Contains(body, `data-workflow-state="1">running`) {
		t.Fatalf("workflows page: %d\n%s", code, body)
	}
	code, body = b.get("/workflows/1")
	if code != http.StatusOK {
		t.Fatalf("workflow page: %d\n%s", code, body)
	}
	for _, want := range []string{"level 0", "level 2", `data-task-state="fetch">available`, `data-task-state="load">pending`,
		"1 to go", `href="/jobs/` + strconv.FormatInt(res.Jobs[0].ID, 10) + `"`,
		`data-why="dependencies" title="dependencies: waiting for fetch to complete"`, `data-why="orphaned"`} {
		if !strings.Contains(body, want) {
			t.Fatalf("workflow page lacks %q:\n%s", want, body)
		}
	}
	if code, _ := b.get("/workflows/99"); code != http.StatusNotFound {
		t.Fatalf("missing workflow: %d, want 404", code)
	}
	if code, _ := b.get("/workflows/x"); code != http.StatusBadRequest {
		t.Fatalf("bad workflow id: %d, want 400", code)
	}
}

// TestWorkflowListPages (issue 20 #14): the workflow list pages as the job
// lists do, so every workflow is reachable: the newest page links to the
// older one by ?before=, which lists the rest; a bad before is a 400.
func TestWorkflowListPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c, err := twice.NewClient(e.store, twice.Config{Registry: e.reg})
	if err != nil {
		t.Fatal(err)
	}
	const total = 205 // more than the 200 the page once showed, and than a page
	for i := 1; i <= total; i++ {
		if _, err := c.EnqueueWorkflow(t.Context(), twice.NewWorkflow(fmt.Sprintf("import-%03d", i)).Add("fetch", okArgs{N: i}, nil)); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)

	seen := map[string]bool{}
	next := regexp.MustCompile(`href="(/workflows\?before=\d+)" rel="next"`)
	path := "/workflows"
	for page := 0; path != "" && page < 10; page++ {
		code, body := b.get(path)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, code, body)
		}
		for _, m := range regexp.MustCompile(`import-\d{3}`).FindAllString(body, -1) {
			seen[m] = true
		}
		path = ""
		if m := next.FindStringSubmatch(body); m != nil {
			path = m[1]
		}
	}
	if len(seen) != total {
		t.Errorf("following the pages reached %d workflows of %d", len(seen), total)
	}
	if code, body := b.get("/workflows?before=x"); code != http.StatusBadRequest || !strings.Contains(body, "before") {
		t.Errorf("GET /workflows?before=x: %d, want 400 saying what before must be\n%s", code, body)
	}
}

// TestWorkflowCancelFromDashboard: a running workflow's page cancels it,
// with a reason and a confirmation; the tasks not started are cancelled
// and the page counts them as cancelled, not dead.
func TestWorkflowCancelFromDashboard(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c, err := twice.NewClient(e.store, twice.Config{Registry: e.reg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueWorkflow(t.Context(), twice.NewWorkflow("nightly import").
		Add("fetch", okArgs{N: 1}, nil).Add("load", okArgs{N: 2}, nil, "fetch")); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)
	if status, body := b.post("/workflows/1", "/workflows/cancel", url.Values{"id": {"1"}}); status != http.StatusBadRequest || !strings.Contains(body, "a reason is required") {
		t.Fatalf("cancel without a reason: %d:\n%s", status, body)
	}
	status, body := b.confirm("/workflows/1", "/workflows/cancel", url.Values{"id": {"1"}, "reason": {"wrong input file"}}, "Cancel workflow 1?")
	if status != http.StatusOK || !strings.Contains(body, `data-workflow-state="1">cancelled`) || !strings.Contains(body, "0 dead, 2 cancelled") {
		t.Fatalf("confirmed cancel: %d, want the workflow cancelled with both tasks counted as cancelled:\n%s", status, body)
	}
	if strings.Contains(body, `id="cancel-workflow"`) {
		t.Fatalf("a cancelled workflow still offers to cancel:\n%s", body)
	}
	if logs := e.logs.String(); !strings.Contains(logs, `action="cancel workflow"`) || !strings.Contains(logs, "wrong input file") {
		t.Fatalf("the cancel was not logged with who and why:\n%s", logs)
	}
}

// TestBatchesPage: the Batches page lists a batch with its counters and
// what became of its callback.
func TestBatchesPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c, err := twice.NewClient(e.store, twice.Config{Registry: e.reg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueBatch(t.Context(), twice.NewBatch(okArgs{N: 9}, nil).Add(okArgs{N: 1}, nil).Add(okArgs{N: 2}, nil)); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)
	code, body := b.get("/batches")
	for _, want := range []string{`data-batch-state="1">running`, "2/2", "web.ok.v1", "when the batch finishes", `href="/batches" class="active"`} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Fatalf("batches page: %d, lacks %q:\n%s", code, want, body)
		}
	}
	if code, _ := b.get("/batches?before=x"); code != http.StatusBadRequest {
		t.Fatalf("a bad before: %d, want 400", code)
	}
}
