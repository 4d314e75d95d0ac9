// Package twiceweb is twice's dashboard: an http.Handler that shows the
// queues, jobs, dead letters, recurring schedules, kill switches and their
// history, orphaned kinds, stranded queues and markers of a store, and
// lets an operator act on them: retry or discard dead jobs, cancel or
// delete a job, pause and resume queues, flip kill switches, remove or
// trigger a schedule. The jobs list cancels, retries, runs now or deletes
// the jobs ticked on it, after a confirmation that states their count.
//
// It is built on a *twice.Client's admin API, the same one the CLI uses:
// a Client made by NewClient without Start serves it, so a dashboard needs
// no worker. Kinds this binary does not register are described by the kind
// catalog the workers publish: their switches, fail-closed flags and
// sensitive fields.
//
// Pages are rendered on the server with html/template and read without
// JavaScript; a few lines of plain JavaScript refresh them live. Every
// asset is embedded: nothing is fetched from the network.
//
// Mount it under any prefix with http.StripPrefix:
//
//	client, err := twice.NewClient(store, twice.Config{Registry: reg})
//	dash, err := twiceweb.New(client, twiceweb.Options{Authenticate: myAuth})
//	mux.Handle("/admin/jobs/", http.StripPrefix("/admin/jobs", dash))
//
// It is safe by default: every state-changing action is a POST carrying a
// CSRF token (and refused cross-origin), ReadOnly turns the actions off,
// every action is logged with who did what and why, and Listen refuses to
// serve on an address other than loopback unless authentication is
// configured. Without authentication it also answers only requests whose
// Host is localhost or a loopback address, so a web page that rebinds its
// own name to 127.0.0.1 (DNS rebinding) cannot read or drive it. Every
// parameter is checked to be UTF-8 text without NUL bytes before any page
// or action sees it, and every response forbids framing and MIME sniffing.
//
// # JSON API
//
// Under /api/v1 the Handler serves the same admin plane to programs as
// JSON: POST /api/v1/jobs enqueues (Client.EnqueueJSON; 201 with the job,
// 200 with duplicate true when its unique key matched an unfinished job),
// GET /api/v1/jobs and /api/v1/jobs/{id} read (args redacted as on the
// pages), POST /api/v1/jobs/{id}/cancel and /retry, POST
// /api/v1/queues/{queue}/pause and /resume, PUT and DELETE
// /api/v1/switches/{kind}, GET /api/v1/kinds (the catalog), GET
// /api/v1/limits and /api/v1/limits/history, PUT and DELETE
// /api/v1/kinds/{kind}/limits and /api/v1/queues/{queue}/concurrency (the
// runtime limits). The OpenAPI
// 3.1 document is at /api/v1/openapi.json. An enqueue's body is kind,
// args, queue, run_at or delay (a Go duration such as "30s": never both,
// never negative), unique_key, priority, max_attempts, metadata, and
// force: true to store a kind no registry, catalog or live worker knows
// (EnqueueOpts.AllowUnknownKind), which is otherwise 422 unknown-kind.
//
// A write needs "Authorization: Bearer <token>" with one of
// Options.APITokens (or Options.BearerToken); the token's name is
// recorded as who acted, and no CSRF token is asked for: a browser never
// adds that header by itself. The dashboard's other authentication
// (BasicAuth, the Authenticate hook, none on loopback) only reads the
// API, since a browser sends those credentials to any page's request. An
// enqueue carrying an Idempotency-Key header runs once per token and key
// (twicehttp.Middleware): a retry replays the first response, the key
// with another body is 422.
//
// Errors are application/problem+json (RFC 9457). A request that cannot
// be parsed (malformed JSON, a wrong type, an unknown field, a second
// value, text that is not UTF-8) is 400, a body over 64 KiB 413, a
// missing or wrong token 401; what the library refuses as input (an
// unknown kind, args against the kind's fields, a past time) is 422; a
// job, queue or switch the path names that does not exist is 404; an
// action the job's state refuses is 409. A refused request stores
// nothing. A problem's type is
// https://pkg.go.dev/github.com/twicejobs/twice/twiceweb#problem- followed
// by one of: invalid-request, unsupported-media-type, body-too-large,
// token-required, token-invalid, unauthenticated, host-not-allowed,
// read-only, not-found, job-not-found, switch-not-found,
// method-not-allowed, job-state-conflict, unknown-kind, invalid-args,
// invalid-input, unstorable, internal; the Idempotency-Key problems are
// twicehttp's.
package twiceweb

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/logattr"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// RefreshIntervalDefault is how often open pages refresh themselves.
const RefreshIntervalDefault = 5 * time.Second

// Options configure the dashboard. The zero value serves a read-write
// dashboard with no authentication, which Listen allows on loopback only.
type Options struct {
	// TogglesFile is the workers' TOML kill switch file, included in the
	// effective states shown. Defaults to none.
	TogglesFile string
	// ReadOnly hides and refuses every action. Defaults to false.
	ReadOnly bool
	// BasicAuth, when set, requires HTTP basic authentication with this
	// user and password. Defaults to none.
	BasicAuth *BasicAuth
	// BearerToken, when set, requires an "Authorization: Bearer" header
	// with this token. Defaults to none.
	BearerToken string
	// Authenticate is the hook for the application's own authentication
	// when the dashboard is mounted in it: it returns who is asking, or an
	// error to refuse the request with 401. It is checked before
	// BasicAuth and BearerToken (either of which then also lets a request
	// in). Defaults to none.
	Authenticate func(r *http.Request) (who string, err error)
	// Metrics, when set, is served at /metrics behind the same
	// authentication (see twicemetrics). Defaults to none.
	Metrics http.Handler
	// Logger receives one line per action (who, what, why) and errors.
	// Defaults to slog.Default().
	Logger *slog.Logger
	// RefreshInterval is how often open pages refresh themselves; negative
	// turns live refresh off. Defaults to RefreshIntervalDefault.
	RefreshInterval time.Duration
	// AllowedHosts are host names (or addresses), without a port, that a
	// request's Host header may name besides localhost, *.localhost and
	// loopback addresses, which are always allowed. Without authentication
	// no other Host is answered: a browser tricked by DNS rebinding into
	// treating an attacker's name as this dashboard sends that name. With
	// authentication, an empty list allows any Host and a non-empty one
	// still restricts it. A leading "*." allows every subdomain. Defaults
	// to none.
	AllowedHosts []string
	// APITokens are the tokens machines send as "Authorization: Bearer
	// <token>" to the JSON API under /api/v1 (see the package doc): its
	// writes (enqueue, cancel, retry, pause, resume, switches) need one of
	// these or BearerToken; the dashboard's other authentication lets a
	// browser read the API only. A token's Name is recorded as who acted.
	// They do not open the dashboard's pages, nor count as its
	// authentication for Listen's loopback rule. Defaults to none.
	APITokens []APIToken
	// SecureCookie marks the CSRF cookie Secure even when the request came
	// in over plain HTTP, as it does behind a proxy that terminates TLS;
	// the browser then never sends it over plain HTTP. Requests that came
	// in over TLS always get a Secure cookie. Defaults to false.
	SecureCookie bool
}

// BasicAuth is a user and password for HTTP basic authentication.
type BasicAuth struct {
	// User and Password must both be set.
	User, Password string
}

// APIToken is one machine's credential for the JSON API.
type APIToken struct {
	// Name says who acts in logs and on the jobs a token's calls touch
	// (a cancel's "by"); at most twice.MaxNameBytes of text.
	Name string
	// Token is the secret, at least APITokenMinBytes long.
	Token string
}

// Handler is the dashboard. Create it with New.
type Handler struct {
	// client carries every action and the reads its admin API offers;
	// store (the client's) serves the remaining reads: counts, throughput,
	// nodes, ticks and markers.
	client *twice.Client
	store  storeReads
	opts   Options
	logger *slog.Logger
	mux    *http.ServeMux
	// csrfKey signs the per-browser CSRF nonce; it is new with every
	// Handler, so a restart invalidates forms left open.
	csrfKey []byte
	pages   *pages
	api     *api
}

// storeReads are the reads the dashboard makes of the client's store
// itself, where the admin API has none: counts, throughput, nodes, ticks.
type storeReads interface {
	JobCount(ctx context.Context, p *twicestore.JobCountParams) (*twicestore.JobCountResult, error)
	JobOrphans(ctx context.Context, p *twicestore.JobOrphansParams) (*twicestore.JobOrphansResult, error)
	JobQueueStats(ctx context.Context, p *twicestore.JobQueueStatsParams) (*twicestore.JobQueueStatsResult, error)
	JobThroughput(ctx context.Context, p *twicestore.JobThroughputParams) (*twicestore.JobThroughputResult, error)
	NodeList(ctx context.Context, p *twicestore.NodeListParams) ([]*twicetype.Node, error)
	ScheduleTicks(ctx context.Context, p *twicestore.ScheduleTicksParams) (*twicestore.ScheduleTicksResult, error)
}

// New returns the dashboard over client's store. The client's registry
// tells which kinds this binary knows beyond the kind catalog; it need not
// be started. New refuses incomplete authentication settings.
func New(client *twice.Client, opts Options) (*Handler, error) {
	if client == nil {
		return nil, errors.New("twiceweb: client is nil: make one with twice.NewClient (it need not be started)")
	}
	if b := opts.BasicAuth; b != nil && (b.User == "" || b.Password == "") {
		return nil, errors.New("twiceweb: BasicAuth needs both a user and a password")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.RefreshInterval == 0 {
		opts.RefreshInterval = RefreshIntervalDefault
	}
	if err := checkAPITokens(opts.APITokens); err != nil {
		return nil, err
	}
	p, err := parsePages()
	if err != nil {
		return nil, err
	}
	h := &Handler{
		client:  client,
		store:   client.Store(),
		opts:    opts,
		logger:  opts.Logger.With(logattr.Component, "dashboard"),
		mux:     http.NewServeMux(),
		csrfKey: make([]byte, 32),
		pages:   p,
	}
	rand.Read(h.csrfKey)
	h.routes()
	h.api = newAPI(h)
	return h, nil
}

// RequiresAuth reports whether every request must authenticate: Listen
// serves on a non-loopback address only when it does.
func (h *Handler) RequiresAuth() bool {
	return h.opts.Authenticate != nil || h.opts.BasicAuth != nil || h.opts.BearerToken != ""
}

// ServeHTTP checks the Host, authenticates the request and checks its
// parameters, then serves the page or action. The security headers go on
// every response, refusals included.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'")
	hd.Set("Referrer-Policy", "same-origin")
	if isAPIPath(r.URL.Path) {
		h.api.ServeHTTP(w, r) // its own checks, answered as problem+json
		return
	}
	if err := h.checkHost(r); err != nil {
		h.logger.WarnContext(r.Context(), "dashboard request refused: host not allowed",
			"remote", r.RemoteAddr, "host", r.Host, "path", r.URL.Path)
		// A plain message: the refused page must carry no CSRF token.
		http.Error(w, "403 forbidden: "+err.Error(), http.StatusForbidden)
		return
	}
	who, ok := h.authenticate(w, r)
	if !ok {
		return
	}
	r = r.WithContext(withRequestInfo(r.Context(), &requestInfo{who: who, base: basePath(r)}))
	if err := checkInput(w, r); err != nil {
		h.logger.WarnContext(r.Context(), "dashboard request refused: bad input",
			"who", who, "path", strconv.QuoteToASCII(r.URL.Path), logattr.Err, err)
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// authenticate returns who is asking, or answers 401 and returns false.
func (h *Handler) authenticate(w http.ResponseWriter, r *http.Request) (string, bool) {
	who, reasons, ok := h.identify(r)
	if ok {
		return who, true
	}
	if h.opts.BasicAuth != nil {
		w.Header().Set("WWW-Authenticate", `Basic realm="twice dashboard", charset="UTF-8"`)
	} else if h.opts.BearerToken != "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="twice dashboard"`)
	}
	h.logger.WarnContext(r.Context(), "dashboard request refused: not authenticated",
		"remote", r.RemoteAddr, "path", r.URL.Path, "reasons", reasons)
	http.Error(w, "401 unauthorized: the twice dashboard needs authentication", http.StatusUnauthorized)
	return "", false
}

// identify returns who is asking by the dashboard's authentication, or
// the reasons the Authenticate hook gave for refusing.
func (h *Handler) identify(r *http.Request) (who string, reasons []string, ok bool) {
	if !h.RequiresAuth() {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		return "anonymous@" + host, nil, true
	}
	if h.opts.Authenticate != nil {
		who, err := h.opts.Authenticate(r)
		if err == nil && who != "" {
			return who, nil, true
		}
		if err != nil {
			reasons = append(reasons, err.Error())
		}
	}
	if b := h.opts.BasicAuth; b != nil {
		if u, p, ok := r.BasicAuth(); ok && equal(u, b.User) && equal(p, b.Password) {
			return u, nil, true
		}
	}
	if tok := h.opts.BearerToken; tok != "" && equal(bearer(r), tok) {
		return dashboardTokenName, nil, true
	}
	return "", reasons, false
}

// bearer is the token of an "Authorization: Bearer" header, or "". The
// scheme is case-insensitive (RFC 9110, section 11.1).
func bearer(r *http.Request) string {
	scheme, got, _ := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(got)
}

// equal compares secrets in constant time.
func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// basePath is the prefix the dashboard is mounted under: what
// http.StripPrefix removed from the path, so links work under any prefix.
func basePath(r *http.Request) string {
	full := r.URL.Path
	if u := r.RequestURI; u != "" && !strings.HasPrefix(u, "http") {
		if p, _, _ := strings.Cut(u, "?"); p != "" {
			full = p
		}
	}
	return strings.TrimSuffix(strings.TrimSuffix(full, r.URL.EscapedPath()), "/")
}

const csrfCookie = "twice_csrf"

// csrfToken returns the token forms carry: an HMAC of the browser's nonce
// cookie, set here when missing. A cross-site page can make the browser
// send the cookie but cannot read it, so it cannot forge the token.
func (h *Handler) csrfToken(w http.ResponseWriter, r *http.Request) string {
	nonce := ""
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 64 {
		nonce = c.Value
	} else {
		b := make([]byte, 32)
		rand.Read(b)
		nonce = hex.EncodeToString(b)
		http.SetCookie(w, &http.Cookie{
			Name: csrfCookie, Value: nonce, Path: info(r).base + "/",
			HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil || h.opts.SecureCookie,
		})
	}
	return h.sign(nonce)
}

func (h *Handler) sign(nonce string) string {
	m := hmac.New(sha256.New, h.csrfKey)
	m.Write([]byte(nonce))
	return hex.EncodeToString(m.Sum(nil))
}

// checkCSRF reports why a POST's token is missing or wrong, or nil.
func (h *Handler) checkCSRF(r *http.Request) error {
	c, err := r.Cookie(csrfCookie)
	if err != nil {
		return errors.New("no CSRF cookie: reload the page and try again")
	}
	got := r.PostFormValue("csrf")
	if got == "" {
		return errors.New("the form has no CSRF token")
	}
	if !hmac.Equal([]byte(got), []byte(h.sign(c.Value))) {
		return errors.New("the CSRF token does not match: reload the page and try again")
	}
	return nil
}

// routes registers the pages and actions. Actions are POSTs only, behind
// the CSRF check and the standard library's cross-origin protection.
func (h *Handler) routes() {
	h.mux.HandleFunc("GET /assets/", serveAsset)
	h.mux.HandleFunc("GET /{$}", h.page(h.overview))
	h.mux.HandleFunc("GET /jobs", h.page(h.jobs))
	h.mux.HandleFunc("GET /jobs/{id}", h.page(h.job))
	h.mux.HandleFunc("GET /dead", h.page(h.dead))
	h.mux.HandleFunc("GET /queues", h.page(h.queues))
	h.mux.HandleFunc("GET /limits", h.page(h.limits))
	h.mux.HandleFunc("GET /recurring", h.page(h.recurring))
	h.mux.HandleFunc("GET /switches", h.page(h.switches))
	h.mux.HandleFunc("GET /switches/history", h.page(h.history))
	h.mux.HandleFunc("GET /orphans", h.page(h.orphans))
	h.mux.HandleFunc("GET /markers", h.page(h.markers))
	h.mux.HandleFunc("GET /workflows", h.page(h.workflows))
	h.mux.HandleFunc("GET /workflows/{id}", h.page(h.workflow))
	h.mux.HandleFunc("GET /batches", h.page(h.batches))
	h.mux.HandleFunc("GET /batches/{id}", h.page(h.batch))
	h.mux.HandleFunc("GET /kinds/{kind}/drain", h.page(h.drain))
	if h.opts.Metrics != nil {
		h.mux.Handle("GET /metrics", h.opts.Metrics)
	}
	cop := http.NewCrossOriginProtection()
	for path, fn := range map[string]actionFunc{
		"POST /dead/retry":        h.retryDead,
		"POST /dead/discard":      h.discardDead,
		"POST /jobs/cancel":       h.cancelJob,
		"POST /jobs/delete":       h.deleteJob,
		"POST /jobs/retry":        h.retryJob,
		"POST /jobs/signal":       h.signalJob,
		"POST /jobs/run-now":      h.runJobNow,
		"POST /workflows/cancel":  h.cancelWorkflow,
		"POST /queues/pause":      h.pauseQueue,
		"POST /queues/resume":     h.resumeQueue,
		"POST /queues/scale":      h.scaleQueue,
		"POST /queues/unscale":    h.unscaleQueue,
		"POST /limits/set":        h.setLimit,
		"POST /limits/reset":      h.resetLimit,
		"POST /switches/set":      h.setSwitch,
		"POST /switches/unset":    h.unsetSwitch,
		"POST /recurring/remove":  h.removeSchedule,
		"POST /recurring/trigger": h.triggerSchedule,
	} {
		h.mux.Handle(path, cop.Handler(h.action(fn)))
	}
	h.mux.Handle("POST /jobs/bulk", cop.Handler(http.HandlerFunc(h.bulkJobs)))
}

// actionFunc carries out one action and returns where to go next, or a
// confirmation page to show instead (when confirm is non-nil).
type actionFunc func(r *http.Request, who string) (next string, confirm *confirmation, err error)

// action wraps an actionFunc with the read-only, CSRF and input checks.
func (h *Handler) action(fn actionFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.actionAllowed(w, r) {
			return
		}
		next, confirm, err := fn(r, info(r).who)
		switch {
		case err != nil:
			h.actionFailed(w, r, err)
		case confirm != nil:
			h.render(w, r, "confirm", "Confirm", confirm)
		default:
			http.Redirect(w, r, info(r).base+next, http.StatusSeeOther)
		}
	}
}

// actionAllowed refuses an action on a read-only dashboard or with a
// missing or wrong CSRF token, answering 403; ServeHTTP has parsed and
// checked the form already.
func (h *Handler) actionAllowed(w http.ResponseWriter, r *http.Request) bool {
	if h.opts.ReadOnly {
		h.fail(w, r, http.StatusForbidden, errors.New("the dashboard is read-only"))
		return false
	}
	if err := h.checkCSRF(r); err != nil {
		h.logger.WarnContext(r.Context(), "dashboard action refused: CSRF check failed",
			"who", info(r).who, "path", r.URL.Path, logattr.Err, err)
		h.fail(w, r, http.StatusForbidden, err)
		return false
	}
	return true
}

// actionFailed answers an action's error with its status: what the
// operator typed 400, a missing job 404, a state that refuses 409, and
// anything else a 500 whose details only the log has.
func (h *Handler) actionFailed(w http.ResponseWriter, r *http.Request, err error) {
	var bad *badInput
	var conflict *stateConflict
	switch {
	case errors.As(err, &bad):
		h.fail(w, r, http.StatusBadRequest, err)
	case errors.Is(err, twice.ErrJobNotFound), errors.Is(err, twicestore.ErrNotFound):
		h.fail(w, r, http.StatusNotFound, err)
	case errors.Is(err, twice.ErrInvalidInput):
		h.fail(w, r, http.StatusBadRequest, err)
	case errors.As(err, &conflict):
		h.fail(w, r, http.StatusConflict, err)
	default:
		h.logger.ErrorContext(r.Context(), "dashboard action failed", "who", info(r).who, "path", r.URL.Path, logattr.Err, err)
		h.fail(w, r, http.StatusInternalServerError, internalError("the action "+r.URL.Path))
	}
}

// badInput is an error in what the operator typed: a 400 with the message.
type badInput struct{ msg string }

func (e *badInput) Error() string { return e.msg }

func badInputf(format string, args ...any) error { return &badInput{msg: fmt.Sprintf(format, args...)} }

// stateConflict is an action the state of the system refused (a finished
// job cannot be cancelled): a 409 with the message.
type stateConflict struct{ err error }

func (e *stateConflict) Error() string { return e.err.Error() }
func (e *stateConflict) Unwrap() error { return e.err }
