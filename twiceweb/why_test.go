package twiceweb_test

import (
	"encoding/json"
	"html"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/whytest"
	"github.com/twicejobs/twice/twiceweb"
)

func TestJobsWhy(t *testing.T) {
	t.Parallel()
	testJobsWhy(t, newEnv(t))
}

func TestPostgresJobsWhy(t *testing.T) {
	t.Parallel()
	testJobsWhy(t, newPostgresEnv(t))
}

// testJobsWhy (issue 25): over a team's database with a job waiting for
// each reason, the API's job objects carry each one's reason as
// "waiting_because", in a listing and alone, and the jobs list and the
// job page show it, on the team binary's dashboard and the stock one's.
func testJobsWhy(t *testing.T, e *env) {
	db := whytest.Start(t, e.store)
	stock, err := twice.NewClient(e.store, twice.Config{})
	if err != nil {
		t.Fatal(err)
	}
	stockLimits, err := stock.LimitList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// The stock dashboard knows the kinds' limits from the catalog, so its
	// throttled job reads throttled too.
	if len(stockLimits) == 0 {
		t.Fatal("a client without the kinds lists no limit: the catalog does not carry them")
	}
	// The team's binary's dashboard, and the stock one's, which knows the
	// kinds from the catalog only.
	for name, reg := range map[string]*twice.Registry{"team": db.Registry, "stock": nil} {
		e.reg = reg
		want := func(j whytest.Job) twice.WaitCode { return j.Code }
		testDashboardWhy(t, name, db, newAPIEnvOn(t, e, twiceweb.Options{}), want)
	}
}

// testDashboardWhy checks the reasons one dashboard (name) shows: the
// code want says of each of db's jobs.
func testDashboardWhy(t *testing.T, name string, db *whytest.DB, a *apiEnv, want func(whytest.Job) twice.WaitCode) {
	t.Helper()
	type job struct {
		ID             int64             `json:"id"`
		State          string            `json:"state"`
		WaitingBecause *twice.WaitReason `json:"waiting_because"`
	}
	res := a.call(http.MethodGet, "/jobs?limit=100", apiToken, "")
	var list struct{ Jobs []job }
	if err := json.Unmarshal([]byte(res.raw), &list); res.status != http.StatusOK || err != nil {
		t.Fatalf("GET /jobs: %d %v\n%s", res.status, err, res.raw)
	}
	byID := map[int64]job{}
	for _, j := range list.Jobs {
		byID[j.ID] = j
		if j.State == "running" && j.WaitingBecause != nil {
			t.Errorf(name+": running job %d has a reason: %+v", j.ID, j.WaitingBecause)
		}
	}
	b := newBrowser(t, a.srv.URL+apiMount)
	_, page := b.get("/jobs")
	for _, w := range db.Jobs {
		r := byID[w.ID].WaitingBecause
		if r == nil || r.Code != want(w) {
			t.Errorf("%s: %s job %d: waiting_because %+v, want code %s", name, w.Name, w.ID, r, want(w))
			continue
		}
		id := strconv.FormatInt(w.ID, 10)
		res := a.call(http.MethodGet, "/jobs/"+id, apiToken, "")
		var one job
		if err := json.Unmarshal([]byte(res.raw), &one); err != nil || one.WaitingBecause == nil || one.WaitingBecause.Text != r.Text {
			t.Errorf(name+": GET /jobs/%s: %d %s, want the listing's reason %q", id, res.status, res.raw, r.Text)
		}
		row := page[strings.Index(page, `data-job="`+id+`"`):]
		row = row[:strings.Index(row, "</tr>")]
		if !strings.Contains(row, `data-why="`+string(r.Code)+`"`) {
			t.Errorf(name+": the jobs list's row of the %s job lacks its reason:\n%s", w.Name, row)
		}
		_, jobPage := b.get("/jobs/" + id)
		if !strings.Contains(jobPage, `id="waiting-because" data-why="`+string(r.Code)+`">Waiting because `+html.EscapeString(r.Text)+"<") {
			t.Errorf(name+": the page of the %s job does not say %q", w.Name, r.Text)
		}
	}
	held := byID[db.Job(t, "held").ID].WaitingBecause
	if held == nil || held.Source != twice.WaitSourceStore || held.By != whytest.SwitchBy || held.Reason != whytest.SwitchReason {
		t.Errorf(name+": held job's reason %+v lacks the switch's source, who and why", held)
	}
	if r := byID[db.Job(t, "throttled").ID].WaitingBecause; r == nil || r.Code == twice.WaitThrottled && (r.Limit == nil || r.Limit.Running != 1 || r.Limit.Throttled != 1) {
		t.Errorf("%s: throttled job's reason %+v lacks its limit's usage", name, r)
	}
}
