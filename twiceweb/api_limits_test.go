package twiceweb_test

import (
	"testing"

	"github.com/twicejobs/twice/internal/testkit/limitstest"
	"github.com/twicejobs/twice/twiceweb"
)

// TestAPILimits: the API lists the limits a live worker publishes,
// overrides a kind's limits and a queue's concurrency (who is the token's
// name), lists the history, resets both, and refuses bad input with a
// problem that changes nothing.
func TestAPILimits(t *testing.T) {
	t.Parallel()
	a := newAPIEnv(t, twiceweb.Options{})
	limitstest.StartWorker(t, a.store)
	const kind = limitstest.Kind

	r := a.call("GET", "/limits", apiToken, "").want(t, 200)
	kinds, _ := r.body["kinds"].([]any)
	if len(kinds) != 1 || kinds[0].(map[string]any)["global_concurrency"] != float64(2) || kinds[0].(map[string]any)["override"] != nil {
		t.Fatalf("GET /limits = %s, want the published kind at global 2 with no override", r.raw)
	}

	a.call("PUT", "/kinds/tenant.synk.v1/limits", apiToken, `{"global_concurrency":3,"reason":"r"}`).want(t, 404)
	a.call("PUT", "/kinds/"+kind+"/limits", apiToken, `{"global_concurrency":-1,"reason":"r"}`).want(t, 422)
	a.call("PUT", "/kinds/"+kind+"/limits", apiToken, `{"rate_limit":"5","reason":"r"}`).want(t, 400)
	a.call("PUT", "/kinds/"+kind+"/limits", apiToken, `{"global":3}`).want(t, 400) // unknown field
	a.call("PUT", "/kinds/"+kind+"/limits", apiToken, `{"reason":"nothing"}`).want(t, 422)
	a.call("PUT", "/kinds/"+kind+"/limits", apiToken, `{"global_concurrency":3,"reason":"a\u0000b"}`).want(t, 422)
	a.call("PUT", "/queues/default/concurrency", apiToken, `{"concurrency":0}`).want(t, 422)
	a.call("PUT", "/queues/default/concurrency", apiToken, `{"reason":"no number"}`).want(t, 400)
	a.call("PUT", "/queues/nowhere/concurrency", apiToken, `{"concurrency":2}`).want(t, 404)
	a.call("DELETE", "/kinds/"+kind+"/limits", apiToken, "").want(t, 404)
	a.call("DELETE", "/queues/default/concurrency", apiToken, "").want(t, 404)
	a.call("PUT", "/kinds/"+kind+"/limits", "", `{"global_concurrency":3}`).want(t, 401)
	a.call("GET", "/limits/history?kind="+kind+"&queue=default", apiToken, "").want(t, 422)
	a.call("GET", "/limits/history?after=1", apiToken, "").want(t, 400)
	if r := a.call("GET", "/limits/history", apiToken, "").want(t, 200); len(r.body["changes"].([]any)) != 0 {
		t.Fatalf("refused calls changed the history: %s", r.raw)
	}

	r = a.call("PUT", "/kinds/"+kind+"/limits", apiToken, `{"global_concurrency":3,"rate_limit":"50/1m","reason":"black friday"}`).want(t, 200)
	limits, _ := r.body["limits"].(map[string]any)
	if r.body["by"] != apiTokName || limits["global_concurrency"] != float64(3) || limits["key_concurrency"] != float64(1) {
		t.Fatalf("PUT limits answered %s", r.raw)
	}
	a.call("PUT", "/queues/default/concurrency", apiToken, `{"concurrency":4,"reason":"backlog"}`).want(t, 200)
	r = a.call("GET", "/limits", apiToken, "").want(t, 200)
	k := r.body["kinds"].([]any)[0].(map[string]any)
	queues := r.body["queues"].([]any)
	if k["global_concurrency"] != float64(3) || k["compiled"].(map[string]any)["global_concurrency"] != float64(2) ||
		k["override"].(map[string]any)["reason"] != "black friday" || len(queues) != 1 || queues[0].(map[string]any)["concurrency"] != float64(4) {
		t.Fatalf("GET /limits after the overrides = %s", r.raw)
	}
	a.call("DELETE", "/kinds/"+kind+"/limits", apiToken, `{"reason":"over"}`).want(t, 200)
	a.call("DELETE", "/queues/default/concurrency", apiToken, `{"reason":"done"}`).want(t, 200)
	r = a.call("GET", "/limits/history?limit=3", apiToken, "").want(t, 200)
	changes := r.body["changes"].([]any)
	first := changes[0].(map[string]any)
	if len(changes) != 3 || r.body["next"] == nil || first["scope"] != "queue" || first["new"] != nil ||
		first["previous"].(map[string]any)["concurrency"] != float64(4) || first["by"] != apiTokName {
		t.Fatalf("GET /limits/history?limit=3 = %s", r.raw)
	}
}
