package twicehttp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/twicejobs/twice/internal/logattr"
	"github.com/twicejobs/twice/twicestore"
)

// The header names the middleware reads and writes.
const (
	// HeaderKey carries the client's idempotency key.
	HeaderKey = "Idempotency-Key"
	// HeaderReplayed is set to "true" on a response replayed from the
	// store, so a client can tell a replay from a fresh run.
	HeaderReplayed = "Idempotent-Replayed"
	// HeaderExpires is set, on every response the handler gives under a
	// key and on its replays, to the HTTP date until which the key is
	// remembered; after it, the key is new again.
	HeaderExpires = "Idempotency-Key-Expires"
)

// Defaults for Options.
const (
	// ExpiryDefault is how long a record is kept.
	ExpiryDefault = 24 * time.Hour
	// LockTimeoutDefault is how long a running request holds its key.
	LockTimeoutDefault = time.Minute
	// MaxBodyBytesDefault is the largest request body accepted.
	MaxBodyBytesDefault = 1 << 20
	// MaxResponseBytesDefault is the largest response body stored for
	// replay.
	MaxResponseBytesDefault = 1 << 20
	// StoreTimeout bounds writing the record after the handler returned;
	// it runs detached from the request's context, so a client that hangs
	// up does not lose the response its retry will ask for.
	StoreTimeout = 10 * time.Second
	// RetryAfter is the delay, in seconds, a 409 suggests before retrying.
	RetryAfter = 1
)

// MethodsDefault are the methods the middleware applies to by default: the
// ones that are not idempotent by definition.
var MethodsDefault = []string{http.MethodPost, http.MethodPatch}

// Options configure Middleware. The zero value of each field but Principal
// means its default.
type Options struct {
	// Principal names the caller of a request (a user or API client id).
	// Records are scoped by principal and key, so one caller can never
	// replay another's response. An error, or an empty principal, answers
	// 401: an application without users returns a constant. Required.
	Principal func(*http.Request) (string, error)
	// Required answers 400 to a request without the Idempotency-Key
	// header. When false, such a request passes through untouched.
	// Defaults to false.
	Required bool
	// Methods the middleware applies to; requests with other methods pass
	// through untouched. Defaults to MethodsDefault (POST and PATCH).
	Methods []string
	// Expiry is how long a key and its response are remembered, from the
	// first request. Defaults to ExpiryDefault (24 h).
	Expiry time.Duration
	// LockTimeout is how long a request holds its key after the last sign
	// of life. While the handler runs, the middleware refreshes the key's
	// lock every third of LockTimeout, so a handler may run longer than
	// LockTimeout and a retry meanwhile still gets 409. A request whose
	// process died stops refreshing: LockTimeout after its last refresh,
	// a retry of the same request takes the key over and runs the handler
	// again. A different request never takes a key over. Defaults to
	// LockTimeoutDefault (1 min).
	LockTimeout time.Duration
	// ReleaseServerErrors gives the key back when the handler answers 5xx,
	// so a retry runs again. By default a 5xx is stored and replayed like
	// any response, as Stripe does: the handler may have had effects
	// before it failed, and running it again could repeat them. Defaults
	// to false.
	ReleaseServerErrors bool
	// MaxBodyBytes is the largest request body accepted; a larger one is
	// answered 413 and not stored. The whole body is read before the
	// handler runs, to fingerprint it. Defaults to MaxBodyBytesDefault
	// (1 MiB).
	MaxBodyBytes int64
	// MaxResponseBytes is the largest response body stored for replay.
	// The response is always sent to the client as the handler writes it
	// (it is never held back), and copied for storage only up to this
	// size. A larger response is recorded as done but not replayable: the
	// handler does not run again for the key, and a retry gets 409
	// response-not-stored, whose problem body gives the first response's
	// status as original_status. Routes whose responses may be large
	// should return a reference (a resource URL) instead. Defaults to
	// MaxResponseBytesDefault (1 MiB).
	MaxResponseBytes int64
	// DropHeaders names response headers that are sent to the client but
	// not stored, so not replayed (any case). Set-Cookie is never stored,
	// whatever this says: a replay must not hand out a session again.
	// Defaults to none beyond Set-Cookie.
	DropHeaders []string
	// Logger receives the errors the client cannot be told about (storing
	// a response that was already sent). Defaults to slog.Default().
	Logger *slog.Logger
}

// withDefaults returns a copy of o with zero fields set to their defaults.
func (o Options) withDefaults() Options {
	if len(o.Methods) == 0 {
		o.Methods = MethodsDefault
	}
	if o.Expiry == 0 {
		o.Expiry = ExpiryDefault
	}
	if o.LockTimeout == 0 {
		o.LockTimeout = LockTimeoutDefault
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = MaxBodyBytesDefault
	}
	if o.MaxResponseBytes == 0 {
		o.MaxResponseBytes = MaxResponseBytesDefault
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// validate reports the first wiring mistake in o.
func (o Options) validate(store KeyStore) error {
	switch {
	case store == nil:
		return errors.New("twicehttp.Middleware: store is nil; pass the store the records live in (twicesqlite's or twicepg's)")
	case o.Principal == nil:
		return errors.New("twicehttp.Middleware: Options.Principal is nil; set it to a func returning the caller's id, so callers never share keys")
	case o.Expiry < 0, o.LockTimeout < 0, o.MaxBodyBytes < 0, o.MaxResponseBytes < 0:
		return fmt.Errorf("twicehttp.Middleware: Expiry (%v), LockTimeout (%v), MaxBodyBytes (%d) and MaxResponseBytes (%d) must not be negative; zero means the default",
			o.Expiry, o.LockTimeout, o.MaxBodyBytes, o.MaxResponseBytes)
	case o.LockTimeout > o.Expiry:
		return fmt.Errorf("twicehttp.Middleware: LockTimeout (%v) exceeds Expiry (%v); a key must outlive its lock", o.LockTimeout, o.Expiry)
	}
	return nil
}

// Middleware returns net/http middleware that makes requests carrying an
// Idempotency-Key header run at most once per principal and key, replaying
// the stored response to retries. See the package doc for the protocol.
//
// It panics when store is nil or opts is invalid (Principal nil, a negative
// duration or size): a wiring mistake, found at startup.
func Middleware(store KeyStore, opts Options) func(http.Handler) http.Handler {
	o := opts.withDefaults()
	if err := o.validate(store); err != nil {
		panic(err)
	}
	drop := map[string]bool{"Set-Cookie": true, headerNotStored: true}
	for _, h := range o.DropHeaders {
		drop[http.CanonicalHeaderKey(h)] = true
	}
	return func(next http.Handler) http.Handler {
		return &middleware{store: store, opts: o, drop: drop, next: next}
	}
}

// middleware is the handler Middleware wraps around next.
type middleware struct {
	store KeyStore
	opts  Options
	drop  map[string]bool // canonical names of the headers never stored
	next  http.Handler
}

// headerNotStored marks, in a stored record's headers, a response that was
// too large to store: its value is the size the handler wrote. It is the
// middleware's own name, never stored from a handler's response.
const headerNotStored = "Twice-Idempotency-Response-Not-Stored"

// ServeHTTP validates the request, then runs, replays or refuses it. Only
// a response from next is stored: anything answered before next runs is
// judged afresh on retry.
func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !slices.Contains(m.opts.Methods, r.Method) {
		m.next.ServeHTTP(w, r)
		return
	}
	values := r.Header.Values(HeaderKey)
	if len(values) == 0 {
		if m.opts.Required {
			writeProblem(w, problemKeyMissing)
			return
		}
		m.next.ServeHTTP(w, r)
		return
	}
	if len(values) > 1 {
		writeProblem(w, problemKeyInvalid)
		return
	}
	key, err := parseKey(values[0])
	if err != nil {
		writeProblem(w, problemKeyInvalid)
		return
	}
	principal, err := m.opts.Principal(r)
	if err != nil || principal == "" {
		writeProblem(w, problemPrincipal)
		return
	}
	body, p := m.readBody(w, r)
	if p != nil {
		writeProblem(w, *p)
		return
	}

	fp := fingerprint(r, body)
	now := time.Now()
	begin, err := m.store.IdempotencyBegin(r.Context(), &twicestore.IdempotencyBeginParams{
		Principal:   principal,
		Key:         key,
		Fingerprint: fp,
		Now:         now,
		ExpiresAt:   now.Add(m.opts.Expiry),
		StaleAfter:  m.opts.LockTimeout,
	})
	if err != nil {
		m.opts.Logger.ErrorContext(r.Context(), "idempotency: take key",
			slog.Any(logattr.Err, err), slog.String(logattr.Component, "twicehttp"))
		writeProblem(w, problemStore)
		return
	}
	rec := begin.Record
	switch {
	case begin.Taken:
		m.run(w, r, principal, key, body, rec.ExpiresAt, rec.LockedAt)
	case rec.Fingerprint != fp:
		writeProblem(w, problemKeyReused)
	case !rec.Done:
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfter))
		writeProblem(w, problemInProgress)
	case len(rec.Header[headerNotStored]) > 0:
		p := problemNotStored
		p.OriginalStatus = rec.Status
		writeProblem(w, p)
	default:
		// Headers set by outer middleware (CORS, tracing) stay; the
		// stored ones win where both set a name.
		h := w.Header()
		for k, v := range rec.Header {
			h[k] = slices.Clone(v)
		}
		h.Set(HeaderReplayed, "true")
		w.WriteHeader(rec.Status)
		_, _ = w.Write(rec.Body)
	}
}

// readBody reads the whole body, up to MaxBodyBytes, or returns the problem
// to answer.
func (m *middleware) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *problem) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if r.ContentLength > m.opts.MaxBodyBytes {
		return nil, &problemBodyTooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, m.opts.MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, &problemBodyTooLarge
		}
		return nil, &problemBodyUnreadable
	}
	return body, nil
}

// run calls next with the key held and the body restored, then stores the
// response, or releases the key when next panics (or answers 5xx with
// ReleaseServerErrors) so a retry runs again.
//
// While next runs, the lock is refreshed (see lockKeeper). Both writes
// carry the lock this request holds last, so a request whose key was
// taken over after its lock went stale cannot overwrite or delete the
// newer request's record.
func (m *middleware) run(w http.ResponseWriter, r *http.Request, principal, key string, body []byte, expiresAt, lockedAt time.Time) {
	keeper := keepLock(r.Context(), m.store, m.opts.Logger,
		twicestore.IdempotencyKeyParams{Principal: principal, Key: key, LockedAt: lockedAt}, m.opts.LockTimeout/3)
	w.Header().Set(HeaderExpires, expiresAt.UTC().Format(http.TimeFormat))
	cw := &captureWriter{ResponseWriter: w, max: m.opts.MaxResponseBytes}
	r.Body = io.NopCloser(bytes.NewReader(body))

	finished := false
	defer func() {
		if finished {
			return
		}
		// next panicked (http.ErrAbortHandler included): the response is
		// cut short, so nothing is worth replaying.
		if keyParams, lost := keeper.stop(); !lost {
			m.release(r, keyParams)
		}
	}()
	m.next.ServeHTTP(cw, r)
	finished = true

	keyParams, lost := keeper.stop()
	if lost {
		m.opts.Logger.ErrorContext(r.Context(), "idempotency: response not stored: while the handler ran, its key's lock went "+
			"unrefreshed for the lock timeout (the store was unreachable, or the process stalled) or the key expired, and a retry took the key",
			slog.Duration("lock_timeout", m.opts.LockTimeout), slog.String(logattr.Component, "twicehttp"))
		return
	}
	status, header, respBody := cw.result()
	if status >= 500 && m.opts.ReleaseServerErrors {
		m.release(r, keyParams)
		return
	}
	stored := make(http.Header, len(header))
	for k, v := range header {
		if !m.drop[http.CanonicalHeaderKey(k)] {
			stored[k] = v
		}
	}
	if cw.tooLarge() {
		// The handler ran and its effects stand, so the key stays done:
		// a retry is told the response cannot be replayed, and never
		// runs the handler again.
		stored = http.Header{headerNotStored: {strconv.FormatInt(cw.written, 10)}}
		respBody = nil
		m.opts.Logger.WarnContext(r.Context(), "idempotency: response larger than MaxResponseBytes not stored; a retry with its key gets 409 response-not-stored",
			slog.Int64("bytes", cw.written), slog.Int64("max_response_bytes", m.opts.MaxResponseBytes),
			slog.String(logattr.Component, "twicehttp"))
	}
	ctx, cancel := storeContext(r)
	defer cancel()
	err := m.store.IdempotencyComplete(ctx, &twicestore.IdempotencyCompleteParams{
		Principal: principal,
		Key:       key,
		LockedAt:  keyParams.LockedAt,
		Status:    status,
		Header:    stored,
		Body:      respBody,
	})
	switch {
	case errors.Is(err, twicestore.ErrNotFound):
		// The last refresh was more than the lock timeout ago (it failed,
		// or this process stalled) and a retry took the key over.
		m.opts.Logger.ErrorContext(ctx, "idempotency: response not stored: the key's lock went stale before the handler returned and a retry took the key over",
			slog.Any(logattr.Err, err), slog.Duration("lock_timeout", m.opts.LockTimeout), slog.String(logattr.Component, "twicehttp"))
	case err != nil:
		// The client has its response. Nothing refreshes the lock any
		// more: a retry gets 409 until the lock timeout has passed since
		// the last refresh, then runs the handler again.
		m.opts.Logger.ErrorContext(ctx, "idempotency: response not stored; a retry gets 409 for up to the lock timeout, then runs the handler again",
			slog.Any(logattr.Err, err), slog.Duration("lock_timeout", m.opts.LockTimeout), slog.String(logattr.Component, "twicehttp"))
	}
}

// release gives the key back, detached from the request's cancellation.
func (m *middleware) release(r *http.Request, p *twicestore.IdempotencyKeyParams) {
	ctx, cancel := storeContext(r)
	defer cancel()
	if err := m.store.IdempotencyRelease(ctx, p); err != nil {
		m.opts.Logger.ErrorContext(ctx, "idempotency: release key; a retry gets 409 for up to the lock timeout, then runs the handler again",
			slog.Any(logattr.Err, err), slog.Duration("lock_timeout", m.opts.LockTimeout), slog.String(logattr.Component, "twicehttp"))
	}
}

// storeContext is the context records are written on after next ran: the
// request's values without its cancellation, bounded by StoreTimeout.
func storeContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), StoreTimeout)
}

// fingerprint identifies a request by method, path with query, and body;
// each part is length-prefixed so no two requests share an encoding.
func fingerprint(r *http.Request, body []byte) string {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(r.Method), []byte(r.URL.RequestURI()), body} {
		_ = binary.Write(h, binary.BigEndian, uint64(len(part)))
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil))
}
