package twicehttp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/twicejobs/twice/twicehttp"
	"github.com/twicejobs/twice/twicesqlite"
)

// A retry of a request with the same Idempotency-Key gets the stored
// response back, without running the handler again. The session cookie the
// first response set is not replayed, nor is a header named in DropHeaders;
// MaxResponseBytes bounds the body kept for replays.
func ExampleMiddleware() {
	dir, err := os.MkdirTemp("", "twicehttp-example")
	if err != nil {
		panic(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	store, err := twicesqlite.Open(context.Background(), filepath.Join(dir, "twice.db"))
	if err != nil {
		panic(err)
	}
	defer func() { _ = store.Close() }()

	orders := 0
	createOrder := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		orders++
		http.SetCookie(w, &http.Cookie{Name: "cart", Value: "empty"})
		w.Header().Set("X-Request-Id", fmt.Sprintf("req-%d", orders))
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, "order %d", orders)
	})
	h := twicehttp.Middleware(store, twicehttp.Options{
		Principal:        func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil },
		MaxResponseBytes: 64 << 10,
		DropHeaders:      []string{"X-Request-Id"},
	})(createOrder)

	for range 2 {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"sku":"tea"}`))
		r.Header.Set("X-User", "alice")
		r.Header.Set(twicehttp.HeaderKey, `"order-tea-1"`)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d %q replayed=%q cookie=%t request-id=%q\n", w.Code, w.Body, w.Header().Get(twicehttp.HeaderReplayed),
			w.Header().Get("Set-Cookie") != "", w.Header().Get("X-Request-Id"))
	}
	// Output:
	// 201 "order 1" replayed="" cookie=true request-id="req-1"
	// 201 "order 1" replayed="true" cookie=false request-id=""
}
