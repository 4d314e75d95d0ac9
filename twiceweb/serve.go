package twiceweb

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// AddrDefault is where the dashboard listens when no address is given:
// loopback only.
const AddrDefault = "127.0.0.1:8090"

// ErrNeedsAuth is returned by Listen for an address other than loopback
// when the handler requires no authentication.
var ErrNeedsAuth = errors.New("twiceweb: refusing to serve the dashboard beyond loopback without authentication")

// IsLoopback reports whether addr (host:port) can only be reached from
// this machine: a loopback IP or "localhost". An empty host means every
// interface, so it is not loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Listen opens addr (AddrDefault when empty) for h. Unless h requires
// authentication, it refuses an address that is not loopback: a dashboard
// that can retry dead jobs and switch kinds on must not be open to the
// network.
func Listen(addr string, h *Handler) (net.Listener, error) {
	if addr == "" {
		addr = AddrDefault
	}
	if !IsLoopback(addr) && !h.RequiresAuth() {
		return nil, fmt.Errorf("%w: %s is not a loopback address; configure basic auth or a bearer token, or listen on 127.0.0.1", ErrNeedsAuth, addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("twiceweb: listen on %s: %w", addr, err)
	}
	return ln, nil
}

// Serve serves handler on ln until ctx is done, then shuts the server
// down, giving open requests a few seconds before it closes their
// connections. It returns nil once ctx ended it.
func Serve(ctx context.Context, ln net.Listener, handler http.Handler) error {
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("twiceweb: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// A browser's speculative connection that never sent a request
		// counts as busy for a while; a dashboard can drop it.
		_ = srv.Close() // nothing more to do if closing fails: Serve returns below
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("twiceweb: serve: %w", err)
	}
	return nil
}
