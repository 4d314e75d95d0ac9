package twiceweb_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twiceweb"
)

// TestAPIEnqueueDelay: "delay" stores the job to run that long after the
// request, as the stored row shows; it excludes "run_at", and a negative
// or malformed one is a 400 that stores nothing.
func TestAPIEnqueueDelay(t *testing.T) {
	t.Parallel()
	a := newAPIEnv(t, twiceweb.Options{})
	before := time.Now()
	r := a.call("POST", "/jobs", apiToken, `{"kind":"web.ok.v1","args":{"N":1},"delay":"1h30m"}`).want(t, http.StatusCreated)
	after := time.Now()

	c, err := twice.NewClient(a.store, twice.Config{Registry: a.reg})
	if err != nil {
		t.Fatal(err)
	}
	j, err := c.JobGet(t.Context(), r.id(t))
	if err != nil {
		t.Fatal(err)
	}
	// Bounded by the clock read around the request, with a second's slack
	// for a store that keeps whole seconds: no timing assumption.
	lo, hi := before.Add(90*time.Minute-time.Second), after.Add(90*time.Minute+time.Second)
	if j.RunAt.Before(lo) || j.RunAt.After(hi) {
		t.Fatalf("stored run_at %s, want between %s and %s", j.RunAt, lo, hi)
	}
	if got, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(r.body["run_at"])); !got.Equal(j.RunAt.UTC()) {
		t.Fatalf("the response's run_at %v is not the stored %s", r.body["run_at"], j.RunAt)
	}

	// "0s" is now.
	a.call("POST", "/jobs", apiToken, `{"kind":"web.ok.v1","args":{"N":2},"delay":"0s"}`).want(t, http.StatusCreated)

	runAt := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for _, tc := range []struct{ name, body, detail string }{
		{"with run_at", `{"kind":"web.ok.v1","args":{"N":1},"delay":"30s","run_at":"` + runAt + `"}`, `"delay" and "run_at" exclude each other`},
		{"negative", `{"kind":"web.ok.v1","args":{"N":1},"delay":"-30s"}`, "negative"},
		{"no unit", `{"kind":"web.ok.v1","args":{"N":1},"delay":"30"}`, "not a duration"},
		{"garbage", `{"kind":"web.ok.v1","args":{"N":1},"delay":"soon"}`, "not a duration"},
		{"a number", `{"kind":"web.ok.v1","args":{"N":1},"delay":30}`, `"delay" is a JSON number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := a.call("POST", "/jobs", apiToken, tc.body).want(t, http.StatusBadRequest)
			if r.problemType() != "invalid-request" || !strings.Contains(fmt.Sprint(r.body["detail"]), tc.detail) {
				t.Fatalf("want invalid-request saying %q: %s", tc.detail, r.raw)
			}
		})
	}
	if n := a.jobCount(); n != 2 {
		t.Fatalf("%d jobs, want the 2 accepted", n)
	}
}

// TestAPIEnqueueForce: a kind nothing knows is refused naming the kind
// and "force"; with "force": true it is stored, its args keys still
// under the name rule.
func TestAPIEnqueueForce(t *testing.T) {
	t.Parallel()
	a := newAPIEnv(t, twiceweb.Options{})
	const kind = "web.never-seen.v1"

	r := a.call("POST", "/jobs", apiToken, `{"kind":"`+kind+`","args":{"user_id":42}}`).want(t, http.StatusUnprocessableEntity)
	if d := fmt.Sprint(r.body["detail"]); r.problemType() != "unknown-kind" || !strings.Contains(d, `"`+kind+`"`) || !strings.Contains(d, `"force": true`) {
		t.Fatalf("want unknown-kind naming %q and force: %s", kind, r.raw)
	}
	r = a.call("POST", "/jobs", apiToken, `{"kind":"`+kind+`","args":{"user_id":42},"force":false}`).want(t, http.StatusUnprocessableEntity)
	if r.problemType() != "unknown-kind" {
		t.Fatalf("force false: %s", r.raw)
	}

	r = a.call("POST", "/jobs", apiToken, `{"kind":"`+kind+`","args":{"user_id":42},"force":true}`).want(t, http.StatusCreated)
	if r.body["kind"] != kind || r.body["state"] != "available" {
		t.Fatalf("forced enqueue answered %s", r.raw)
	}
	got := a.call("GET", fmt.Sprintf("/jobs/%d", r.id(t)), apiToken, "").want(t, http.StatusOK)
	if got.body["kind"] != kind {
		t.Fatalf("stored %s", got.raw)
	}

	// Forced, the shape is unknown: a key named like a secret is refused.
	r = a.call("POST", "/jobs", apiToken, `{"kind":"`+kind+`","args":{"password":"x"},"force":true}`).want(t, http.StatusUnprocessableEntity)
	if r.problemType() != "invalid-args" {
		t.Fatalf("a secret-named key, forced: %s", r.raw)
	}
	// Force changes nothing for a registered kind.
	a.call("POST", "/jobs", apiToken, `{"kind":"web.ok.v1","args":{"N":1},"force":true}`).want(t, http.StatusCreated)
	if n := a.jobCount(); n != 2 {
		t.Fatalf("%d jobs, want 2", n)
	}
}
