package storetest

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

var insertTests = []test{
	{"Metadata", testInsertMetadata},
	{"SingleRoundTrip", testInsertSingle},
	{"ManyInInputOrder", testInsertMany},
	{"ManyAcrossBatchSizes", testInsertLarge},
	{"Defaults", testInsertDefaults},
	{"Empty", testInsertEmpty},
}

// argsBytes is a payload whose exact bytes a store must keep: spacing, key
// order and escapes that a JSON-normalising column (jsonb) would rewrite.
var argsBytes = []byte(`{ "z": 1,  "a": "caf\u00e9 ☕", "n": [1.50, 2e3], "dup": 1, "dup": 2 }`)

// testInsertSingle round-trips one job with a unique key and one without:
// a driver may insert a single job without a key by a statement of its own
// (PostgreSQL does), which must store and return the same row.
func testInsertSingle(t *testing.T, e *env) {
	for _, key := range []string{"unique-1", ""} {
		p := e.job("storetest.single.v1")
		p.Queue = "emails"
		p.Priority = 3
		p.Args = argsBytes
		p.UniqueKey = key
		p.MaxAttempts = 7
		p.CreatedAt = e.at(-time.Hour)
		p.RunAt = e.at(90 * time.Second)
		p.MessageID, p.Key, p.CorrelationID = "msg-"+key, "idem-"+key, "corr-"+key

		res := e.insert(p)[0]
		if res.Duplicate {
			t.Fatalf("unique key %q: first insert reported Duplicate", key)
		}
		if res.Job.ID <= 0 {
			t.Fatalf("unique key %q: ID = %d, want > 0", key, res.Job.ID)
		}
		want := &twicetype.JobRow{
			ID:            res.Job.ID,
			Kind:          p.Kind,
			Queue:         p.Queue,
			Priority:      p.Priority,
			Args:          argsBytes,
			MessageID:     p.MessageID,
			Key:           p.Key,
			CorrelationID: p.CorrelationID,
			UniqueKey:     p.UniqueKey,
			State:         twicetype.JobStateAvailable,
			MaxAttempts:   p.MaxAttempts,
			RunAt:         p.RunAt,
			CreatedAt:     p.CreatedAt,
		}
		checkJob(t, "inserted row", res.Job, want)
		checkJob(t, "JobGet", e.get(res.Job.ID), want)
	}
}

func testInsertMany(t *testing.T, e *env) {
	var ps []*twicestore.JobInsertParams
	for i := range 5 {
		p := e.job(fmt.Sprintf("storetest.many%d.v1", i%2))
		p.Args = []byte(fmt.Sprintf(`{"i":%d}`, i))
		p.Priority = 5 - i
		p.RunAt = e.at(time.Duration(i) * time.Second)
		ps = append(ps, p)
	}
	res := e.insert(ps...)
	seen := map[int64]bool{}
	for i, r := range res {
		if r.Duplicate {
			t.Errorf("job %d: Duplicate without a unique key", i)
		}
		if seen[r.Job.ID] {
			t.Errorf("job %d: ID %d returned twice", i, r.Job.ID)
		}
		seen[r.Job.ID] = true
		want := &twicetype.JobRow{
			ID: r.Job.ID, Kind: ps[i].Kind, Queue: ps[i].Queue, Priority: ps[i].Priority,
			Args: ps[i].Args, MessageID: ps[i].MessageID, Key: ps[i].Key,
			CorrelationID: ps[i].CorrelationID, State: twicetype.JobStateAvailable,
			MaxAttempts: ps[i].MaxAttempts, RunAt: ps[i].RunAt, CreatedAt: ps[i].CreatedAt,
		}
		checkJob(t, fmt.Sprintf("result %d", i), r.Job, want)
		checkJob(t, fmt.Sprintf("JobGet of result %d", i), e.get(r.Job.ID), want)
	}
}

// testInsertLarge inserts more jobs than a driver is likely to put in one
// statement, with unique duplicates spread across the batch, and checks
// every result still lines up with its input.
func testInsertLarge(t *testing.T, e *env) {
	const n = 1234
	var ps []*twicestore.JobInsertParams
	for i := range n {
		p := e.job("storetest.large.v1")
		p.Args = []byte(fmt.Sprintf(`{"i":%d}`, i))
		if i%100 == 0 {
			p.UniqueKey = fmt.Sprintf("u%d", i%300) // u0, u100 and u200, each repeated
		}
		ps = append(ps, p)
	}
	res := e.insert(ps...)
	first := map[string]int64{}
	inserted := 0
	for i, r := range res {
		if string(r.Job.Args) != string(ps[i].Args) && !r.Duplicate {
			t.Fatalf("result %d has args %s, want %s", i, r.Job.Args, ps[i].Args)
		}
		if ps[i].UniqueKey == "" {
			if r.Duplicate {
				t.Fatalf("result %d: Duplicate without a unique key", i)
			}
			inserted++
			continue
		}
		id, ok := first[ps[i].UniqueKey]
		switch {
		case !ok && r.Duplicate:
			t.Fatalf("result %d: first job with unique key %q reported Duplicate", i, ps[i].UniqueKey)
		case !ok:
			first[ps[i].UniqueKey] = r.Job.ID
			inserted++
		case !r.Duplicate:
			t.Fatalf("result %d: repeated unique key %q inserted again", i, ps[i].UniqueKey)
		case r.Job.ID != id:
			t.Fatalf("result %d: duplicate of job %d, want %d", i, r.Job.ID, id)
		}
	}
	count, err := e.s.JobCount(e.ctx, &twicestore.JobCountParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(count.Counts) != 1 || count.Counts[0].Count != inserted {
		t.Fatalf("JobCount = %+v, want one group of %d", count.Counts, inserted)
	}
}

func testInsertDefaults(t *testing.T, e *env) {
	before := time.Now()
	p := e.job("storetest.defaults.v1")
	p.Args = nil
	p.CreatedAt = time.Time{}
	p.RunAt = time.Time{}
	j := e.insertOne(p)
	after := time.Now()

	if j.State != twicetype.JobStateAvailable || j.Attempt != 0 || j.Epoch != 0 {
		t.Errorf("state, attempt, epoch = %s, %d, %d; want available, 0, 0", j.State, j.Attempt, j.Epoch)
	}
	if !j.LeaseUntil.IsZero() || j.AttemptedBy != "" || !j.FinishedAt.IsZero() || j.Note != "" || len(j.Errors) != 0 {
		t.Errorf("a new job has lease %v, attempted by %q, finished %v, note %q, errors %v; want all empty",
			j.LeaseUntil, j.AttemptedBy, j.FinishedAt, j.Note, j.Errors)
	}
	if len(j.Args) != 0 {
		t.Errorf("nil Args stored as %q, want empty", j.Args)
	}
	// The store's clock may be another machine's: allow some skew.
	if j.CreatedAt.Before(before.Add(-time.Minute)) || j.CreatedAt.After(after.Add(time.Minute)) {
		t.Errorf("zero CreatedAt became %v, want about %v", j.CreatedAt, before)
	}
	if !j.RunAt.Equal(j.CreatedAt) {
		t.Errorf("zero RunAt became %v, want CreatedAt %v", j.RunAt, j.CreatedAt)
	}
	checkJob(t, "JobGet", e.get(j.ID), j)

	// Due at once: a fetch at the store's creation time takes it.
	if got := e.fetch(j.CreatedAt, 10, "node-a", p.Kind); len(got) != 1 {
		t.Errorf("fetch at CreatedAt got %d jobs, want 1", len(got))
	}
}

func testInsertEmpty(t *testing.T, e *env) {
	res, err := e.s.JobInsertMany(e.ctx, &twicestore.JobInsertManyParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 0 {
		t.Fatalf("got %d results for no jobs", len(res.Jobs))
	}
}

func testInsertMetadata(t *testing.T, e *env) {
	with := e.job("storetest.meta.v1")
	with.Metadata = map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "é": "ü \"q\""}
	without := e.job("storetest.meta.v1")
	res := e.insert(with, without)
	if got := res[0].Job.Metadata; !maps.Equal(got, with.Metadata) {
		t.Errorf("inserted metadata = %v, want %v", got, with.Metadata)
	}
	if got := res[1].Job.Metadata; len(got) != 0 {
		t.Errorf("a job inserted without metadata has %v", got)
	}
	if got := e.get(res[0].Job.ID).Metadata; !maps.Equal(got, with.Metadata) {
		t.Errorf("JobGet metadata = %v, want %v", got, with.Metadata)
	}
	fetched := e.fetch(e.base, 2, "node-a", "storetest.meta.v1")
	if len(fetched) != 2 || !maps.Equal(fetched[0].Metadata, with.Metadata) || len(fetched[1].Metadata) != 0 {
		t.Errorf("fetched %d jobs with metadata %v", len(fetched), fetched)
	}
}
