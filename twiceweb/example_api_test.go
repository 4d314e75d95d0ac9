package twiceweb_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twiceweb"
)

// welcomeArgs are an example kind's args.
type welcomeArgs struct {
	UserID int `json:"user_id"`
}

func (welcomeArgs) Kind() string { return "email.welcome.v1" }

// Jobs enqueued over the JSON API by a service in another language: its
// token authorizes the write, and its Idempotency-Key makes a retried POST
// return the same job instead of a second one.
func ExampleOptions_apiTokens() {
	dir, _ := os.MkdirTemp("", "twiceweb-api-example-")
	defer func() { _ = os.RemoveAll(dir) }()
	store, err := twicesqlite.Open(context.Background(), filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	defer func() { _ = store.Close() }()
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[welcomeArgs](func(context.Context, *twice.Job[welcomeArgs]) error { return nil }), nil)
	client, err := twice.NewClient(store, twice.Config{Registry: reg})
	if err != nil {
		panic(err)
	}
	dash, err := twiceweb.New(client, twiceweb.Options{
		// Generate each with 'openssl rand -hex 32'; keep them in your secret store.
		APITokens: []twiceweb.APIToken{{Name: "signup-service", Token: "5f1c0e6b3a9d4e7f8a2b6c0d1e3f5a7b"}},
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/jobs/", http.StripPrefix("/admin/jobs", dash))

	for range 2 { // the second POST is a client's retry after a lost response
		req := httptest.NewRequest(http.MethodPost, "/admin/jobs/api/v1/jobs",
			strings.NewReader(`{"kind": "email.welcome.v1", "args": {"user_id": 42}}`))
		req.Header.Set("Authorization", "Bearer 5f1c0e6b3a9d4e7f8a2b6c0d1e3f5a7b")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", `"signup-42-welcome"`)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		var job struct {
			ID    int64  `json:"id"`
			State string `json:"state"`
		}
		_ = json.Unmarshal(rec.Body.Bytes(), &job)
		fmt.Println(rec.Code, job.ID, job.State, rec.Header().Get("Location"), "replayed:", rec.Header().Get("Idempotent-Replayed") == "true")
	}

	// No token: a write is refused with a problem that says what to send.
	req := httptest.NewRequest(http.MethodPost, "http://localhost/admin/jobs/api/v1/jobs", strings.NewReader(`{"kind": "email.welcome.v1"}`))
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	fmt.Println(rec.Code, rec.Header().Get("Content-Type"))
	// Output:
	// 201 1 available /admin/jobs/api/v1/jobs/1 replayed: false
	// 201 1 available /admin/jobs/api/v1/jobs/1 replayed: true
	// 401 application/problem+json
}
