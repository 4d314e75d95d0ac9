package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// A metadata pair that SQL and JSON both quote.
const oddKey, oddValue = `it's "odd"\`, `o'dd \"é\\'`

// searchJobs stores the jobs of the search checks, in id order: a (c1,
// tenant acme, region eu; leased, so running), b (c1, tenant acme), c
// (c2, tenant other, region eu), d (c1, no metadata) and e (c1, of another
// kind, tenant acme and a key and value with quotes and backslashes).
func (e *env) searchJobs() (a, b, c, d, x int64) {
	const k1, k2 = "storetest.search1.v1", "storetest.search2.v1"
	mk := func(kind, corr string, md map[string]string) *twicestore.JobInsertParams {
		p := e.job(kind)
		p.CorrelationID, p.Metadata = corr, md
		return p
	}
	var got []int64
	for _, p := range []*twicestore.JobInsertParams{
		mk(k1, "c1", map[string]string{"tenant": "acme", "region": "eu"}),
		mk(k1, "c1", map[string]string{"tenant": "acme"}),
		mk(k1, "c2", map[string]string{"tenant": "other", "region": "eu"}),
		mk(k1, "c1", nil),
		mk(k2, "c1", map[string]string{"tenant": "acme", oddKey: oddValue}),
	} {
		got = append(got, e.insertOne(p).ID)
	}
	if j := e.fetchOne(e.base, k1); j.ID != got[0] {
		e.t.Fatalf("fetched job %d, want %d", j.ID, got[0])
	}
	return got[0], got[1], got[2], got[3], got[4]
}

func testListByCorrelationAndMetadata(t *testing.T, e *env) {
	a, b, c, d, x := e.searchJobs()
	acme := map[string]string{"tenant": "acme"}
	for _, tc := range []struct {
		name   string
		filter twicestore.JobFilter
		want   []int64
	}{
		{"correlation id", twicestore.JobFilter{CorrelationID: "c1"}, descending(a, b, d, x)},
		{"correlation id, running", twicestore.JobFilter{CorrelationID: "c1", State: twicetype.JobStateRunning}, descending(a)},
		{"correlation id, due", twicestore.JobFilter{CorrelationID: "c1", Timing: twicestore.JobDue, Now: e.base}, descending(b, d, x)},
		{"correlation id and kind", twicestore.JobFilter{CorrelationID: "c1", Kind: "storetest.search1.v1"}, descending(a, b, d)},
		{"metadata pair", twicestore.JobFilter{Metadata: acme}, descending(a, b, x)},
		{"metadata pairs, all must match", twicestore.JobFilter{Metadata: map[string]string{"tenant": "acme", "region": "eu"}}, descending(a)},
		{"metadata, another value", twicestore.JobFilter{Metadata: map[string]string{"region": "eu"}}, descending(a, c)},
		{"metadata, available", twicestore.JobFilter{Metadata: acme, State: twicetype.JobStateAvailable}, descending(b, x)},
		{"metadata and kind", twicestore.JobFilter{Metadata: acme, Kind: "storetest.search2.v1"}, descending(x)},
		{"metadata and correlation id", twicestore.JobFilter{Metadata: map[string]string{"region": "eu"}, CorrelationID: "c2"}, descending(c)},
		{"metadata with quotes and backslashes", twicestore.JobFilter{Metadata: map[string]string{oddKey: oddValue}}, descending(x)},
		{"metadata, a key no job has", twicestore.JobFilter{Metadata: map[string]string{"nope": "acme"}}, nil},
		{"metadata, an empty value", twicestore.JobFilter{Metadata: map[string]string{"tenant": ""}}, nil},
		{"metadata, a value of another key", twicestore.JobFilter{Metadata: map[string]string{"region": "acme"}}, nil},
		{"correlation id no job has", twicestore.JobFilter{CorrelationID: "c3"}, nil},
	} {
		if got := e.list(&twicestore.JobListParams{Filter: tc.filter}); !slices.Equal(got, tc.want) {
			t.Errorf("%s: JobList = %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := e.list(&twicestore.JobListParams{Filter: twicestore.JobFilter{CorrelationID: "c1"}, BeforeID: d, Limit: 1}); !slices.Equal(got, []int64{b}) {
		t.Errorf("correlation id, next page of 1: JobList = %v, want [%d]", got, b)
	}
	res, err := e.s.JobCount(e.ctx, &twicestore.JobCountParams{Filter: twicestore.JobFilter{Metadata: acme}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range res.Counts {
		n += c.Count
	}
	if n != 3 {
		t.Errorf("JobCount by metadata = %+v, want 3 jobs", res.Counts)
	}
	if _, err := e.s.JobList(e.ctx, &twicestore.JobListParams{Filter: twicestore.JobFilter{Metadata: map[string]string{"": "x"}}}); err == nil {
		t.Error("JobList with a metadata pair with no key: no error")
	}
}

func testBulkByCorrelationAndMetadata(t *testing.T, e *env) {
	a, b, c, d, x := e.searchJobs()
	now := e.at(time.Minute)
	res, err := e.s.JobCancel(e.ctx, &twicestore.JobCancelParams{
		Filter: twicestore.JobFilter{Metadata: map[string]string{"tenant": "acme"}, State: twicetype.JobStateAvailable},
		By:     "ops", Reason: "tenant left", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if want := sorted([]int64{b, x}); !slices.Equal(sorted(res.IDs), want) {
		t.Fatalf("JobCancel by metadata cancelled %v, want %v", res.IDs, want)
	}
	if st := e.get(c).State; st != twicetype.JobStateAvailable {
		t.Errorf("job %d of another tenant is %s, want available", c, st)
	}
	// The retry by correlation id matches a (running), b, d (available)
	// and x, and retries the cancelled ones.
	r := e.retryResults(&twicestore.JobBulkParams{Filter: twicestore.JobFilter{CorrelationID: "c1"}, Now: now})
	var matched []int64
	for _, j := range r.Results {
		matched = append(matched, j.ID)
	}
	if want := sorted([]int64{a, b, d, x}); !slices.Equal(matched, want) {
		t.Errorf("JobRetry by correlation id matched %v, want %v", matched, want)
	}
	if want := sorted([]int64{b, x}); !slices.Equal(sorted(r.IDs), want) {
		t.Errorf("JobRetry by correlation id retried %v, want %v", r.IDs, want)
	}
	del, err := e.s.JobDelete(e.ctx, &twicestore.JobBulkParams{Filter: twicestore.JobFilter{CorrelationID: "c2",
		Metadata: map[string]string{"region": "eu"}}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(del.IDs, []int64{c}) {
		t.Errorf("JobDelete by correlation id and metadata deleted %v, want [%d]", del.IDs, c)
	}
}
