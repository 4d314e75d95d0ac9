// Command httpapi is an HTTP API whose POST /orders enqueues a job, behind
// twicehttp's Idempotency-Key middleware: a client that retries a request
// (a timeout, a dropped connection) with the same key gets the first
// response back, and the job is enqueued once. The middleware stops the
// request from running twice; the job's marker stops its effect from
// happening twice.
//
//	go run ./examples/httpapi -db /tmp/api.db -addr 127.0.0.1:8080
//	curl -X POST -H 'Idempotency-Key: "k1"' -H 'X-User: ada' -d '{"order_id":7}' localhost:8080/orders
//
// Without -addr it serves on a free port, sends one request twice, prints
// what came back, and exits.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicehttp"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
)

// ShipOrder ships one order.
type ShipOrder struct {
	OrderID int64 `json:"order_id"`
}

// Kind names the job.
func (ShipOrder) Kind() string { return "order.ship.v1" }

// IdempotencyKey: one shipment per order, however many jobs ask for it.
func (a ShipOrder) IdempotencyKey() string { return fmt.Sprint(a.OrderID) }

// newAPI is the application's HTTP handler: POST /orders enqueues the
// shipment and answers 202 with the job's id.
func newAPI(store twicestore.Store, client *twice.Client) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		var args ShipOrder
		if err := json.NewDecoder(r.Body).Decode(&args); err != nil || args.OrderID <= 0 {
			http.Error(w, `give {"order_id": N}`, http.StatusBadRequest)
			return
		}
		res, err := client.Enqueue(r.Context(), args, nil)
		if err != nil {
			http.Error(w, "could not enqueue the shipment; retry with the same Idempotency-Key", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(map[string]int64{"job_id": res.Job.ID})
	})
	idempotent := twicehttp.Middleware(store, twicehttp.Options{
		// Keys are per caller: one user never sees another's response.
		// Use the authenticated user here; the example trusts a header.
		Principal: func(r *http.Request) (string, error) {
			if u := r.Header.Get("X-User"); u != "" {
				return u, nil
			}
			return "", errors.New("no X-User header")
		},
		Required: true, // POST without a key: 400, so clients cannot forget it
	})
	return idempotent(mux)
}

func main() {
	db := flag.String("db", "api.db", "SQLite database file")
	addr := flag.String("addr", "", "serve on this address until interrupted; empty runs the demo and exits")
	flag.Parse()
	ctx := context.Background()
	var err error
	if *addr != "" {
		err = serve(ctx, *db, *addr)
	} else {
		err = run(ctx, *db, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpapi:", err)
		os.Exit(1)
	}
}

func open(ctx context.Context, path string) (*twicesqlite.Store, *twice.Client, error) {
	store, err := twicesqlite.Open(ctx, path)
	if err != nil {
		return nil, nil, err
	}
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[ShipOrder](func(ctx context.Context, job *twice.Job[ShipOrder]) error {
		twice.Logger(ctx).Info("shipping", "order_id", job.Args.OrderID)
		return nil
	}), nil)
	client, err := twice.NewClient(store, twice.Config{
		Registry: reg,
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		_ = store.Close()
		return nil, nil, err
	}
	return store, client, nil
}

func serve(ctx context.Context, path, addr string) error {
	store, client, err := open(ctx, path)
	if err != nil {
		return err
	}
	defer func() { _ = store.Close() }()
	if err := client.Start(ctx); err != nil {
		return err
	}
	defer func() {
		// Running jobs get 10 s; the ones still running are put back
		// without spending an attempt.
		stopCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = client.Shutdown(stopCtx, 10*time.Second)
	}()
	return http.ListenAndServe(addr, newAPI(store, client))
}

// run serves the API on a free port and sends the same request twice, as a
// client whose first response was lost would.
func run(ctx context.Context, path string, out io.Writer) error {
	store, client, err := open(ctx, path)
	if err != nil {
		return err
	}
	defer func() { _ = store.Close() }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: newAPI(store, client), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()

	for i := range 2 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ln.Addr().String()+"/orders", strings.NewReader(`{"order_id": 7}`))
		req.Header.Set(twicehttp.HeaderKey, `"order-7-attempt"`)
		req.Header.Set("X-User", "ada")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		replayed := resp.Header.Get(twicehttp.HeaderReplayed) == "true"
		_, _ = fmt.Fprintf(out, "request %d: %d %s (replayed: %t)\n", i+1, resp.StatusCode, strings.TrimSpace(string(body)), replayed)
	}
	jobs, err := client.JobList(ctx, &twice.JobListParams{JobFilter: twice.JobFilter{Kind: ShipOrder{}.Kind()}})
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(out, "shipment jobs enqueued: %d\n", len(jobs.Jobs))
	return nil
}
