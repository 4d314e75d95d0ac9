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

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicemetrics"
	"github.com/twicejobs/twice/twiceweb"
)

// dashboardFlags are the flags of serve and demo that serve the dashboard.
type dashboardFlags struct {
	flag      string // the address flag's name, for messages
	addr      string
	basicAuth string
	token     string
	readOnly  bool
	hosts     []string
	secure    bool
	file      string
	tokenFlag string // the token file flag's name, for messages
	tokenFile string
	authFlag  string // the basic-auth flag's name, for messages
}

// register adds the flags to cmd: --PREFIX (the address), and
// --PREFIX-basic-auth, --PREFIX-token, --PREFIX-api-token-file,
// --PREFIX-read-only and the rest; with an empty prefix --addr,
// --basic-auth, --token, --api-token-file, --read-only and the rest.
func (d *dashboardFlags) register(cmd *cobra.Command, prefix, defaultAddr, what string) {
	f := cmd.Flags()
	name := func(s string) string {
		if prefix == "" {
			return s
		}
		return prefix + "-" + s
	}
	addr := prefix
	if addr == "" {
		addr = "addr"
	}
	d.flag = "--" + addr
	f.StringVar(&d.addr, addr, defaultAddr, what)
	d.authFlag = "--" + name("basic-auth")
	f.StringVar(&d.basicAuth, name("basic-auth"), os.Getenv("TWICE_DASHBOARD_BASIC_AUTH"),
		"USER:PASSWORD the dashboard requires (env TWICE_DASHBOARD_BASIC_AUTH, which keeps it out of ps)")
	f.StringVar(&d.token, name("token"), os.Getenv("TWICE_DASHBOARD_TOKEN"),
		"bearer token the dashboard requires (env TWICE_DASHBOARD_TOKEN, which keeps it out of ps)")
	d.tokenFlag = "--" + name("api-token-file")
	f.StringVar(&d.tokenFile, name("api-token-file"), "",
		"file of the JSON API's tokens, one a line: TOKEN or NAME TOKEN (NAME is logged as who acted; # starts a comment); "+
			"combined with env "+apiTokensEnv+" (comma separated, same entries). Writes to /api/v1 need one of them")
	f.BoolVar(&d.readOnly, name("read-only"), false, "serve the dashboard without its actions (retry, cancel, discard, pause, kill switches)")
	f.StringSliceVar(&d.hosts, name("allowed-host"), nil,
		"a host name the dashboard answers besides localhost and loopback addresses (repeatable; a leading *. allows subdomains); without authentication no other name is answered, which stops DNS rebinding")
	f.BoolVar(&d.secure, name("secure-cookie"), false, "mark the CSRF cookie Secure, for a dashboard behind a proxy that terminates TLS")
	f.StringVar(&d.file, name("toggles-file"), "", "the workers' TOML kill switch file, included in the switches the dashboard shows")
}

// options checks the flags and turns them into the dashboard's options.
func (d *dashboardFlags) options(logger *slog.Logger, metrics *twicemetrics.Metrics) (twiceweb.Options, error) {
	o := twiceweb.Options{ReadOnly: d.readOnly, BearerToken: d.token, Logger: logger, AllowedHosts: d.hosts, SecureCookie: d.secure, TogglesFile: d.file}
	if metrics != nil {
		o.Metrics = metrics.Handler()
	}
	tokens, err := readAPITokens(d.tokenFlag, d.tokenFile, os.Getenv(apiTokensEnv))
	if err != nil {
		return o, err
	}
	o.APITokens = tokens
	if d.basicAuth != "" {
		user, pass, ok := strings.Cut(d.basicAuth, ":")
		if !ok || user == "" || pass == "" {
			return o, usagef("%s: give USER:PASSWORD, both non-empty", d.authFlag)
		}
		o.BasicAuth = &twiceweb.BasicAuth{User: user, Password: pass}
	}
	return o, nil
}

// start serves the dashboard and /metrics on --dashboard until ctx ends,
// and returns a func that waits for the server to shut down. The dashboard
// acts through client's admin API (a worker's own client, or one that is
// not started: it runs no worker). It refuses a non-loopback address
// without authentication before serving anything. When the address is only
// the default (optional), a port already taken is reported and the command
// goes on without a dashboard. wait is never nil, even with an error, so
// a caller may defer it before it knows.
func (d *dashboardFlags) start(ctx context.Context, client *twice.Client, metrics *twicemetrics.Metrics,
	logger *slog.Logger, out io.Writer, optional bool) (wait func(), err error) {
	if d.addr == "" {
		return func() {}, nil
	}
	o, err := d.options(logger, metrics)
	if err != nil {
		return func() {}, err
	}
	if metrics != nil {
		metrics.ReportWaitReasons(client) // twice_jobs_not_running, on the dashboard's /metrics
	}
	h, err := twiceweb.New(client, o)
	if err != nil {
		return func() {}, err
	}
	ln, err := twiceweb.Listen(d.addr, h)
	if err != nil && optional && !errors.Is(err, twiceweb.ErrNeedsAuth) {
		fmt.Fprintf(out, "dashboard: not served (%v); pass %s with a free address\n", err, d.flag)
		return func() {}, nil
	}
	if err != nil {
		return func() {}, &usageError{err: fmt.Errorf("%s %s: %w", d.flag, d.addr, err)}
	}
	// One write: a reader that waits for the address line (a script, a
	// test) then has the token line too.
	started := fmt.Sprintf("dashboard: http://%s/ (metrics at /metrics)\n", ln.Addr())
	if n := len(o.APITokens); n > 0 {
		names := make([]string, n)
		for i, t := range o.APITokens {
			names[i] = t.Name
		}
		started += fmt.Sprintf("dashboard: JSON API writes at /api/v1 take %d token(s): %s\n", n, strings.Join(names, ", "))
	}
	fmt.Fprint(out, started)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := twiceweb.Serve(ctx, ln, h); err != nil {
			logger.Error("dashboard stopped", "err", err)
		}
	}()
	return func() { <-done }, nil
}

func (c *cli) dashboardCommand() *cobra.Command {
	var dash dashboardFlags
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve the dashboard and /metrics on --db, without a worker, until SIGINT or SIGTERM",
		Long: `Serve the dashboard and Prometheus metrics (/metrics) on --addr for the
database --db, until SIGINT or SIGTERM. It starts no worker: it works no
job, writes no switch and creates no table; the only writes are the
actions an operator takes on its pages (retry, cancel, pause, switches),
each logged with who and why. --read-only hides those too.

Kinds this binary does not register are described by the catalog the
workers publish: their switches, fail-closed flags and sensitive fields.
An address other than loopback needs --basic-auth or --token.

The JSON API under /api/v1 (enqueue, cancel, retry, pause, switches)
writes only for a caller sending "Authorization: Bearer TOKEN" with one
of its API tokens, read from --api-token-file (one a line) and from
TWICE_API_TOKENS (comma separated); both are used when both are given.
An entry is TOKEN or NAME TOKEN: NAME is logged as who acted, and a bare
token is named token-<first 8 hex digits of its SHA-256>. A token is at
least 32 bytes of printable ASCII: 'openssl rand -hex 32' makes one.
API tokens open neither the pages nor a non-loopback address.`,
		Example: `  twice dashboard --db postgres://twice@db/prod --addr 127.0.0.1:8090
  TWICE_DASHBOARD_TOKEN=s3cret twice dashboard --addr 0.0.0.0:8090 --read-only
  twice dashboard --db postgres://twice@db/prod --api-token-file /run/secrets/twice-api-tokens`,
		Args: unknownSubcommand,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if dash.addr == "" {
				return usagef("--addr is empty: give the address to serve on, e.g. %s", twiceweb.AddrDefault)
			}
			logger, err := c.logger(cmd, slog.LevelInfo)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			store, err := c.openStore(ctx, false)
			if err != nil {
				return err
			}
			defer func() { _ = store.Close() }()
			cfg := twice.Config{Registry: c.reg, Logger: logger, Queues: c.cfg.Queues, DefaultQueue: c.cfg.DefaultQueue,
				WaitTokenKey: c.waitTokenKey()}
			if len(cfg.Queues) == 0 {
				if cfg.Queues, err = c.defaultQueues(ctx, store); err != nil {
					return err
				}
			}
			client, err := twice.NewClient(store, cfg) // never started: no worker
			if err != nil {
				return err
			}
			wait, err := dash.start(ctx, client, twicemetrics.New(store), logger, c.stdout, false)
			if err != nil {
				return err
			}
			wait()
			return nil
		}),
	}
	dash.register(cmd, "", twiceweb.AddrDefault, "address to serve the dashboard and /metrics on")
	return cmd
}
