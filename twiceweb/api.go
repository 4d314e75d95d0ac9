package twiceweb

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed" // the OpenAPI document
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/freetext"
	"github.com/twicejobs/twice/internal/logattr"
	"github.com/twicejobs/twice/twicehttp"
)

// The JSON API: see the package doc's "JSON API" section. Its routes are
// apiRoutes; openapi.json describes them and a test holds the two equal.

// apiPrefix is the path the API is served under, below the mount point.
const apiPrefix = "/api/v1/"

// Caps on what the API accepts.
const (
	// APITokenMinBytes is the shortest APIToken.Token New accepts: 128
	// bits as hex.
	APITokenMinBytes = 32
	// apiMaxBodyBytes bounds a request body: the largest is an enqueue,
	// whose args the library caps well below (2 KiB by default).
	apiMaxBodyBytes = 64 << 10
	// apiMaxMetadata bounds an enqueue's metadata: entries, and bytes per
	// value (a W3C tracestate is at most 512 list members of short keys).
	apiMaxMetadata      = 32
	apiMaxMetadataValue = 4 << 10
)

//go:embed openapi.json
var openAPIDocument []byte

// isAPIPath reports whether path is the API's.
func isAPIPath(path string) bool {
	return path == strings.TrimSuffix(apiPrefix, "/") || strings.HasPrefix(path, apiPrefix)
}

// checkAPITokens refuses an incomplete or ambiguous token list.
func checkAPITokens(tokens []APIToken) error {
	names := make(map[string]bool, len(tokens))
	secrets := make(map[string]bool, len(tokens))
	for i, t := range tokens {
		if err := freetext.Check("twiceweb: APITokens["+strconv.Itoa(i)+"].Name", t.Name, twice.MaxNameBytes); err != nil {
			return err
		}
		switch {
		case strings.TrimSpace(t.Name) == "":
			return fmt.Errorf("twiceweb: APITokens[%d] has no Name: name each token after the machine that holds it, as it is recorded as who acted", i)
		case len(t.Token) < APITokenMinBytes:
			return fmt.Errorf("twiceweb: APITokens[%d] (%q): the token is %d bytes, under %d: generate one with 'openssl rand -hex 32'", i, t.Name, len(t.Token), APITokenMinBytes)
		case strings.ContainsAny(t.Token, " \t\r\n"):
			return fmt.Errorf("twiceweb: APITokens[%d] (%q): the token contains white space, which an Authorization header cannot carry: generate one with 'openssl rand -hex 32'", i, t.Name)
		case t.Name == dashboardTokenName:
			return fmt.Errorf("twiceweb: APITokens[%d]: the name %q is the one Options.BearerToken acts under: choose another", i, t.Name)
		case names[t.Name]:
			return fmt.Errorf("twiceweb: APITokens[%d]: the name %q is used twice: give each token its own name", i, t.Name)
		case secrets[t.Token]:
			return fmt.Errorf("twiceweb: APITokens[%d] (%q): the same token is listed twice: give each machine its own", i, t.Name)
		}
		names[t.Name], secrets[t.Token] = true, true
	}
	return nil
}

// api serves the JSON API for a Handler.
type api struct {
	h   *Handler
	mux *http.ServeMux
}

// apiRoute is one route of the API; apiRoutes is the one list the mux is
// built from and the OpenAPI test walks.
type apiRoute struct {
	pattern string // "METHOD /api/v1/path/{param}"
	serve   apiFunc
}

// apiFunc answers one API request: a status and a value to encode as
// JSON, or an error that becomes a problem (see problemFor).
type apiFunc func(r *http.Request, c *caller) (status int, body any, err error)

// caller is who sends an API request, and whether a token proves it.
type caller struct {
	name  string
	token bool
}

type callerKey struct{}

func callerOf(ctx context.Context) *caller {
	c, _ := ctx.Value(callerKey{}).(*caller)
	return c
}

func (a *api) routes() []apiRoute {
	return []apiRoute{
		{"GET /api/v1/openapi.json", a.openAPI},
		{"POST /api/v1/jobs", a.enqueue},
		{"GET /api/v1/jobs", a.listJobs},
		{"GET /api/v1/jobs/{id}", a.getJob},
		{"POST /api/v1/jobs/{id}/cancel", a.cancelJob},
		{"POST /api/v1/jobs/{id}/retry", a.retryJob},
		{"POST /api/v1/jobs/{id}/signals/{name}", a.signalJob},
		{"POST /api/v1/signals/{token}", a.signalByToken},
		{"POST /api/v1/queues/{queue}/pause", a.pauseQueue},
		{"POST /api/v1/queues/{queue}/resume", a.resumeQueue},
		{"PUT /api/v1/switches/{kind}", a.setSwitch},
		{"DELETE /api/v1/switches/{kind}", a.unsetSwitch},
		{"GET /api/v1/kinds", a.kinds},
		{"GET /api/v1/limits", a.limits},
		{"GET /api/v1/limits/history", a.limitHistory},
		{"PUT /api/v1/kinds/{kind}/limits", a.setLimit},
		{"DELETE /api/v1/kinds/{kind}/limits", a.resetLimit},
		{"PUT /api/v1/queues/{queue}/concurrency", a.scaleQueue},
		{"DELETE /api/v1/queues/{queue}/concurrency", a.unscaleQueue},
	}
}

func newAPI(h *Handler) *api {
	a := &api{h: h, mux: http.NewServeMux()}
	// An enqueue runs at most once per caller and Idempotency-Key: a
	// client that lost the response retries with the same key and gets the
	// same job back, never a second one.
	idem := twicehttp.Middleware(h.client.Store(), twicehttp.Options{
		Principal: func(r *http.Request) (string, error) {
			if c := callerOf(r.Context()); c != nil && c.token {
				return "token:" + c.name, nil
			}
			return "", errors.New("no token")
		},
		MaxBodyBytes: apiMaxBodyBytes,
		Logger:       h.logger,
	})
	// A wait token's holder (a provider's webhook) has no API token: its
	// Idempotency-Key records are kept per wait token. The signal itself
	// resolves its wait once whatever the key, so a retry without one is
	// a duplicate that changes nothing.
	tokenIdem := twicehttp.Middleware(h.client.Store(), twicehttp.Options{
		Principal: func(r *http.Request) (string, error) {
			sum := sha256.Sum256([]byte(r.PathValue("token")))
			return "wait-token:" + hex.EncodeToString(sum[:16]), nil
		},
		MaxBodyBytes: apiMaxBodyBytes,
		Logger:       h.logger,
	})
	for _, rt := range a.routes() {
		var hd http.Handler = a.handle(rt.serve)
		switch rt.pattern {
		case "POST /api/v1/jobs", "POST /api/v1/jobs/{id}/signals/{name}":
			hd = idem(hd)
		case "POST /api/v1/signals/{token}":
			hd = tokenIdem(hd)
		}
		a.mux.Handle(rt.pattern, hd)
	}
	return a
}

// ServeHTTP checks the caller and the request's text, then serves it.
// Every refusal is problem+json.
func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := a.h
	w.Header().Set("Cache-Control", "no-store")
	c, p := a.authenticate(r)
	if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, signalPathPrefix) {
		// The wait token in the path is the credential (checked by
		// Client.SignalByToken), and its holder is a third party's server,
		// not a browser: no API token, no Host rule.
		c, p = &caller{name: "wait-token"}, nil
	}
	if p != nil {
		h.logger.WarnContext(r.Context(), "api request refused: "+p.Title,
			"remote", r.RemoteAddr, "path", strconv.QuoteToASCII(r.URL.Path), logattr.Err, p.Detail)
		if p.Status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="twice api"`)
		}
		writeProblem(w, p)
		return
	}
	if err := checkAPIQuery(r); err != nil {
		writeProblem(w, badRequest(err.Error()))
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead && h.opts.ReadOnly {
		writeProblem(w, &problem{Type: "read-only", Title: "Read-only", Status: http.StatusForbidden,
			Detail: "this dashboard is read-only (twiceweb.Options.ReadOnly): its API only reads"})
		return
	}
	if _, pattern := a.mux.Handler(r); pattern == "" {
		writeProblem(w, a.unrouted(r))
		return
	}
	a.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
}

// authenticate returns the caller, or the problem to refuse it with. A
// bearer token is checked first; a request without one is judged by the
// dashboard's Host rule and authentication, and may only read.
func (a *api) authenticate(r *http.Request) (*caller, *problem) {
	h := a.h
	tok := bearer(r)
	if tok != "" {
		if name, ok := h.apiToken(tok); ok {
			return &caller{name: name, token: true}, nil
		}
	}
	// No API token: a browser, a tool on this machine, or the
	// application's own scheme (the Authenticate hook may read a bearer
	// token of its own). The dashboard's rules apply, DNS rebinding
	// included, and the caller may only read.
	if err := h.checkHost(r); err != nil {
		return nil, &problem{Type: "host-not-allowed", Title: "Host not allowed", Status: http.StatusForbidden, Detail: err.Error()}
	}
	write := r.Method != http.MethodGet && r.Method != http.MethodHead
	who, _, ok := h.identify(r)
	switch {
	case tok != "" && (!ok || write || !h.RequiresAuth()):
		// A wrong token is refused, not ignored, unless the dashboard's
		// own authentication takes it (the Authenticate hook may read a
		// bearer token of the application's) for a read.
		return nil, &problem{Type: "token-invalid", Title: "Token invalid", Status: http.StatusUnauthorized,
			Detail: "the bearer token is not one of this server's API tokens: check it against twiceweb.Options.APITokens"}
	case !ok:
		return nil, &problem{Type: "unauthenticated", Title: "Authentication required", Status: http.StatusUnauthorized,
			Detail: "send Authorization: Bearer <token> with one of the server's API tokens (twiceweb.Options.APITokens)"}
	case write:
		return nil, &problem{Type: "token-required", Title: "Token required", Status: http.StatusUnauthorized,
			Detail: "writes to the JSON API need Authorization: Bearer <token> with one of the server's API tokens (twiceweb.Options.APITokens); " +
				"a browser's credentials only read it, as a page on another site could make the browser send them"}
	}
	return &caller{name: who}, nil
}

// dashboardTokenName is who a request authenticated by
// Options.BearerToken acts as.
const dashboardTokenName = "bearer-token"

// apiToken returns the name of the API token tok, comparing it with every
// token in constant time, so the time taken tells nothing of which one
// matched or how much of it.
func (h *Handler) apiToken(tok string) (string, bool) {
	name, found := "", false
	for _, t := range h.opts.APITokens {
		if equal(tok, t.Token) {
			name, found = t.Name, true
		}
	}
	if tk := h.opts.BearerToken; tk != "" && equal(tok, tk) {
		name, found = dashboardTokenName, true
	}
	return name, found
}

// unrouted is the problem for a request no route takes: 405 with the
// methods the path has, or 404.
func (a *api) unrouted(r *http.Request) *problem {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
		r2 := r.Clone(r.Context())
		r2.Method = m
		if _, pattern := a.mux.Handler(r2); pattern != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		return &problem{Type: "method-not-allowed", Title: "Method not allowed", Status: http.StatusMethodNotAllowed,
			Detail: fmt.Sprintf("%s does not take %s: use %s", r.URL.Path, r.Method, strings.Join(allow, " or ")),
			allow:  strings.Join(allow, ", ")}
	}
	return &problem{Type: "not-found", Title: "Not found", Status: http.StatusNotFound,
		Detail: fmt.Sprintf("no API route is %s: see %sopenapi.json for the routes", strconv.QuoteToASCII(r.URL.Path), apiPrefix)}
}

// checkAPIQuery refuses a path or query that is not text (as the
// dashboard's checkInput does).
func checkAPIQuery(r *http.Request) error {
	if err := checkText("the path", r.URL.Path); err != nil {
		return err
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return errors.New("the query string is malformed: encode it as name=value pairs joined by &")
	}
	return checkValues("query parameter", q)
}

// handle turns an apiFunc into a handler that writes its JSON or problem.
func (a *api) handle(fn apiFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c := callerOf(r.Context())
		status, body, err := fn(r, c)
		if err != nil {
			p := problemFor(err)
			if p.Status >= 500 {
				a.h.logger.ErrorContext(r.Context(), "api request failed", "who", c.name, "path", strconv.QuoteToASCII(r.URL.Path), logattr.Err, err)
			}
			writeProblem(w, p)
			return
		}
		if l, ok := body.(interface{ location() string }); ok {
			w.Header().Set("Location", basePath(r)+l.location())
		}
		if raw, ok := body.(json.RawMessage); ok {
			writeJSON(w, status, raw)
			return
		}
		b, err := json.Marshal(body)
		if err != nil {
			a.h.logger.ErrorContext(r.Context(), "api response not encoded", "path", r.URL.Path, logattr.Err, err)
			writeProblem(w, problemFor(err))
			return
		}
		writeJSON(w, status, b)
	}
}

func writeJSON(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// decodeBody decodes r's JSON body into v strictly: one JSON value of
// application/json, UTF-8 (a decoder would swap bad bytes for U+FFFD
// silently), no unknown field, no value of the wrong type, at most
// apiMaxBodyBytes. An empty body leaves v as it is when optional.
func decodeBody(r *http.Request, v any, optional bool) error {
	body, err := readJSONBody(r)
	if err != nil {
		return err
	}
	if body == nil {
		if optional {
			return nil
		}
		return badRequest("the request has no body: send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest(jsonError(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("the body holds more than one JSON value: send one object")
	}
	return nil
}

// readJSONBody reads r's body as every JSON route takes it: at most
// apiMaxBodyBytes, application/json (or +json) when a type is given, and
// UTF-8. It returns nil for an empty body.
func readJSONBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, apiMaxBodyBytes+1))
	if err != nil {
		return nil, badRequest("the request body could not be read: send it again")
	}
	if len(body) > apiMaxBodyBytes {
		return nil, &problem{Type: "body-too-large", Title: "Request body too large", Status: http.StatusRequestEntityTooLarge,
			Detail: fmt.Sprintf("the request body is over %d KiB: send less (job args and signal payloads are capped far below)", apiMaxBodyBytes>>10)}
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, nil
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return nil, &problem{Type: "unsupported-media-type", Title: "Unsupported media type", Status: http.StatusUnsupportedMediaType,
				Detail: fmt.Sprintf("the body is %s: send JSON with Content-Type: application/json", strconv.QuoteToASCII(ct))}
		}
	}
	if !utf8.Valid(body) {
		return nil, badRequest("the request body is not valid UTF-8: encode it as UTF-8 JSON")
	}
	return body, nil
}

// jsonError says what is wrong with a body encoding/json refused.
func jsonError(err error) string {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Sprintf("the body is not valid JSON (at byte %d: %v): send one JSON object", syntax.Offset, syntax)
	case errors.As(err, &typ) && typ.Field != "":
		return fmt.Sprintf("field %q is a JSON %s, not %s: send it as the API document says", typ.Field, typ.Value, jsonType(typ.Type.Kind().String()))
	case errors.As(err, &typ):
		return fmt.Sprintf("the body is a JSON %s: send a JSON object", typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the body is cut short: send one whole JSON object"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return strings.TrimPrefix(err.Error(), "json: ") + ": remove it (see the API document for the fields)"
	}
	return "the body is not the JSON object expected: " + err.Error()
}

// jsonType names a Go kind as JSON calls it.
func jsonType(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "map", "struct":
		return "an object"
	case "slice", "array":
		return "an array"
	case "int", "int64", "int32", "float64", "uint", "uint64":
		return "a number"
	}
	return goKind
}

// pathID parses the {id} of a job route.
func pathID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, &problem{Type: "job-not-found", Title: "Job not found", Status: http.StatusNotFound,
			Detail: fmt.Sprintf("%s is not a job id: job ids are positive integers", strconv.QuoteToASCII(r.PathValue("id")))}
	}
	return id, nil
}

// openAPI serves the OpenAPI document.
func (a *api) openAPI(*http.Request, *caller) (int, any, error) {
	return http.StatusOK, json.RawMessage(openAPIDocument), nil
}
