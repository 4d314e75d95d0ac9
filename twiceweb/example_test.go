package twiceweb_test

import (
	"context"
	"errors"
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

// The dashboard mounted under a prefix of an application's own mux, behind
// the application's authentication.
func Example() {
	dir, _ := os.MkdirTemp("", "twiceweb-example-")
	defer func() { _ = os.RemoveAll(dir) }()
	store, err := twicesqlite.Open(context.Background(), filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	defer func() { _ = store.Close() }()

	// A client that is not started serves the admin API the dashboard is
	// built on; pass your registry so it knows your kinds.
	client, err := twice.NewClient(store, twice.Config{Registry: twice.NewRegistry()})
	if err != nil {
		panic(err)
	}
	dash, err := twiceweb.New(client, twiceweb.Options{
		Authenticate: func(r *http.Request) (string, error) {
			if user := r.Header.Get("X-User"); user != "" { // your session or SSO here
				return user, nil
			}
			return "", errors.New("not signed in")
		},
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/jobs/", http.StripPrefix("/admin/jobs", dash))

	for _, user := range []string{"", "ada"} {
		req := httptest.NewRequest(http.MethodGet, "/admin/jobs/dead", nil)
		req.Header.Set("X-User", user)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		fmt.Println(rec.Code, strings.Contains(rec.Body.String(), `href="/admin/jobs/switches"`))
	}
	// Output:
	// 401 false
	// 200 true
}

// Without authentication the dashboard answers only requests for
// localhost and loopback addresses, so a page that rebinds its own name to
// this machine cannot drive it; AllowedHosts names the others to answer,
// such as the name a loopback-only proxy forwards.
func ExampleOptions_allowedHosts() {
	dir, _ := os.MkdirTemp("", "twiceweb-example-")
	defer func() { _ = os.RemoveAll(dir) }()
	store, err := twicesqlite.Open(context.Background(), filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	defer func() { _ = store.Close() }()
	client, err := twice.NewClient(store, twice.Config{})
	if err != nil {
		panic(err)
	}
	dash, err := twiceweb.New(client, twiceweb.Options{AllowedHosts: []string{"jobs.internal"}})
	if err != nil {
		panic(err)
	}
	for _, host := range []string{"localhost:8090", "127.0.0.1:8090", "jobs.internal", "attacker.example:8090"} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		dash.ServeHTTP(rec, req)
		fmt.Println(host, rec.Code)
	}
	// Output:
	// localhost:8090 200
	// 127.0.0.1:8090 200
	// jobs.internal 200
	// attacker.example:8090 403
}
