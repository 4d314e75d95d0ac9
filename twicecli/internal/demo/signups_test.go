package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicehttp"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// apiSetup runs the demo's worker and HTTP API on a fresh database.
func apiSetup(t *testing.T) (*App, *httptest.Server) {
	t.Helper()
	opts, _ := testOptions(t)
	a, client, err := open(t.Context(), opts.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	if err := client.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = client.Stop(ctx)
	})
	srv := httptest.NewServer(a.Handler(client))
	t.Cleanup(srv.Close)
	return a, srv
}

type apiResponse struct {
	status int
	header http.Header
	body   string
}

func post(t *testing.T, srv *httptest.Server, key, body string) apiResponse {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/signups", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) apiResponse {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return apiResponse{res.StatusCode, res.Header, string(b)}
}

func countUsers(t *testing.T, a *App) int {
	t.Helper()
	var n int
	if err := a.db.QueryRowContext(t.Context(), `SELECT count(*) FROM demo_users`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSignupAPI is the README's curl sequence: a signup, its retry
// replayed, the key reused with another body refused, and one email sent.
func TestSignupAPI(t *testing.T) {
	t.Parallel()
	a, srv := apiSetup(t)

	first := post(t, srv, `"signup-ada-1"`, `{"name": "ada", "bonus_cents": 500}`)
	if first.status != http.StatusCreated {
		t.Fatalf("first signup: %d %s", first.status, first.body)
	}
	var s signupResponse
	if err := json.Unmarshal([]byte(first.body), &s); err != nil || s.UserID == 0 || s.EmailJobID == 0 || s.CreditJobID == 0 {
		t.Fatalf("first signup answered %q (%v)", first.body, err)
	}

	replay := post(t, srv, `"signup-ada-1"`, `{"name": "ada", "bonus_cents": 500}`)
	if replay.status != http.StatusCreated || replay.body != first.body || replay.header.Get(twicehttp.HeaderReplayed) != "true" {
		t.Fatalf("retry: %d %q replayed=%q; want the first response replayed", replay.status, replay.body, replay.header.Get(twicehttp.HeaderReplayed))
	}

	mismatch := post(t, srv, `"signup-ada-1"`, `{"name": "bob", "bonus_cents": 500}`)
	if mismatch.status != http.StatusUnprocessableEntity || mismatch.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("key reused with another body: %d %s %q", mismatch.status, mismatch.header.Get("Content-Type"), mismatch.body)
	}
	if n := countUsers(t, a); n != 1 {
		t.Fatalf("%d users after a signup, its retry and a mismatch; want 1", n)
	}

	// The email job runs once: one email in the sink.
	var row *twicetype.JobRow
	waitfor.Cond(t, fmt.Sprintf("email job %d to complete", s.EmailJobID), func() bool {
		var err error
		if row, err = a.store.JobGet(t.Context(), &twicestore.JobGetParams{ID: s.EmailJobID}); err != nil {
			t.Fatal(err)
		}
		return row.State == twicetype.JobStateCompleted
	}, func() string { return string(row.State) })
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+first.header.Get("Location"), nil)
	user := do(t, req)
	var u userResponse
	if err := json.Unmarshal([]byte(user.body), &u); err != nil || user.status != http.StatusOK {
		t.Fatalf("GET %s: %d %q", first.header.Get("Location"), user.status, user.body)
	}
	if u.ID != s.UserID || u.Name != "ada" || u.EmailsSent != 1 {
		t.Fatalf("user = %+v, want ada with 1 email sent", u)
	}
}

// TestSignupAPIBadInput: each bad request gets a problem document saying
// what to fix, and creates nothing.
func TestSignupAPIBadInput(t *testing.T) {
	t.Parallel()
	a, srv := apiSetup(t)
	for _, tc := range []struct {
		name, key, body string
		status          int
		want            string
	}{
		{"no key", "", `{"name": "ada"}`, http.StatusBadRequest, "Idempotency-Key"},
		{"malformed key", `"unterminated`, `{"name": "ada"}`, http.StatusBadRequest, "Idempotency-Key"},
		{"malformed JSON", `"k-json"`, `{"name": `, http.StatusBadRequest, "JSON object"},
		{"unknown field", `"k-field"`, `{"name": "ada", "admin": true}`, http.StatusBadRequest, `unknown field`},
		{"bad name", `"k-name"`, `{"name": "Ada Lovelace"}`, http.StatusUnprocessableEntity, "lowercase letters"},
		{"bonus too large", `"k-bonus"`, `{"name": "ada", "bonus_cents": 1000000}`, http.StatusUnprocessableEntity, "between 0 and 10000"},
		{"body too large", `"k-large"`, `{"name": "` + strings.Repeat("a", 5000) + `"}`, http.StatusRequestEntityTooLarge, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := post(t, srv, tc.key, tc.body)
			if r.status != tc.status || !strings.Contains(r.body, tc.want) || r.header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("%d %s %q; want %d problem+json mentioning %q", r.status, r.header.Get("Content-Type"), r.body, tc.status, tc.want)
			}
		})
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/users/abc", nil)
	if r := do(t, req); r.status != http.StatusBadRequest {
		t.Errorf("GET /users/abc: %d %q", r.status, r.body)
	}
	req, _ = http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/users/999", nil)
	if r := do(t, req); r.status != http.StatusNotFound {
		t.Errorf("GET /users/999: %d %q", r.status, r.body)
	}
	if n := countUsers(t, a); n != 0 {
		t.Fatalf("bad requests created %d users", n)
	}
}
