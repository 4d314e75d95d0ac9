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
	defer os.RemoveAll(dir)
	store, err := twicesqlite.Open(context.Background(), filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	defer store.Close()

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
