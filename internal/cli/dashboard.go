package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice/internal/demo"
	"github.com/twicejobs/twice/twicemetrics"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twiceweb"
)

// dashboardFlags are the flags of serve and demo that serve the dashboard.
type dashboardFlags struct {
	addr      string
	basicAuth string
	token     string
	readOnly  bool
}

func (d *dashboardFlags) register(cmd *cobra.Command, defaultAddr, what string) {
	f := cmd.Flags()
	f.StringVar(&d.addr, "dashboard", defaultAddr, what)
	f.StringVar(&d.basicAuth, "dashboard-basic-auth", os.Getenv("TWICE_DASHBOARD_BASIC_AUTH"),
		"USER:PASSWORD the dashboard requires (env TWICE_DASHBOARD_BASIC_AUTH, which keeps it out of ps)")
	f.StringVar(&d.token, "dashboard-token", os.Getenv("TWICE_DASHBOARD_TOKEN"),
		"bearer token the dashboard requires (env TWICE_DASHBOARD_TOKEN, which keeps it out of ps)")
	f.BoolVar(&d.readOnly, "dashboard-read-only", false, "serve the dashboard without its actions (retry, discard, kill switches)")
}

// options checks the flags and turns them into the dashboard's options.
func (d *dashboardFlags) options(logger *slog.Logger, metrics *twicemetrics.Metrics) (twiceweb.Options, error) {
	reg, err := demo.NewRegistry(nil)
	if err != nil {
		return twiceweb.Options{}, err
	}
	o := twiceweb.Options{Registry: reg, ReadOnly: d.readOnly, BearerToken: d.token, Logger: logger, Metrics: metrics.Handler()}
	if d.basicAuth != "" {
		user, pass, ok := strings.Cut(d.basicAuth, ":")
		if !ok || user == "" || pass == "" {
			return o, usagef("--dashboard-basic-auth: give USER:PASSWORD, both non-empty")
		}
		o.BasicAuth = &twiceweb.BasicAuth{User: user, Password: pass}
	}
	return o, nil
}

// start serves the dashboard and /metrics on --dashboard until ctx ends,
// and returns a func that waits for the server to shut down. It refuses a
// non-loopback address without authentication before serving anything.
// When the address is only the default (optional), a port already taken
// is reported and the command goes on without a dashboard.
func (d *dashboardFlags) start(ctx context.Context, store twicestore.Store, metrics *twicemetrics.Metrics,
	logger *slog.Logger, out io.Writer, optional bool) (wait func(), err error) {
	if d.addr == "" {
		return func() {}, nil
	}
	o, err := d.options(logger, metrics)
	if err != nil {
		return nil, err
	}
	h, err := twiceweb.New(store, o)
	if err != nil {
		return nil, err
	}
	ln, err := twiceweb.Listen(d.addr, h)
	if err != nil && optional && !errors.Is(err, twiceweb.ErrNeedsAuth) {
		fmt.Fprintf(out, "dashboard: not served (%v); pass --dashboard with a free address\n", err)
		return func() {}, nil
	}
	if err != nil {
		return nil, &usageError{err: fmt.Errorf("--dashboard %s: %w", d.addr, err)}
	}
	fmt.Fprintf(out, "dashboard: http://%s/ (metrics at /metrics)\n", ln.Addr())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := twiceweb.Serve(ctx, ln, h); err != nil {
			logger.Error("dashboard stopped", "err", err)
		}
	}()
	return func() { <-done }, nil
}
