package twiceweb

import (
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/logattr"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

//go:embed assets
var embedded embed.FS

// assetFS holds the static files served under /assets/.
var assetFS = func() fs.FS {
	sub, err := fs.Sub(embedded, "assets/static")
	if err != nil {
		panic(err)
	}
	return sub
}()

// requestInfo is what every page and action knows about its request.
type requestInfo struct {
	who  string // the authenticated user, or anonymous@address
	base string // the prefix the dashboard is mounted under
}

type infoKey struct{}

func withRequestInfo(ctx context.Context, i *requestInfo) context.Context {
	return context.WithValue(ctx, infoKey{}, i)
}

func info(r *http.Request) *requestInfo {
	if i, ok := r.Context().Value(infoKey{}).(*requestInfo); ok {
		return i
	}
	return &requestInfo{}
}

// pages holds one parsed template set per page: the layout with that
// page's "content".
type pages struct {
	set map[string]*template.Template
}

var pageNames = []string{"overview", "jobs", "job", "dead", "recurring", "switches", "history", "queues", "limits", "orphans", "markers", "confirm", "error", "workflows", "workflow", "batches", "drain", "bulk"}

func parsePages() (*pages, error) {
	p := &pages{set: map[string]*template.Template{}}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(embedded,
			"assets/templates/layout.html", "assets/templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("twiceweb: parse page %s: %w", name, err)
		}
		p.set[name] = t
	}
	return p, nil
}

// view is what the layout renders around a page's content.
type view struct {
	Title    string
	Page     string
	Base     string
	Who      string
	CSRF     string
	ReadOnly bool
	Refresh  int64 // milliseconds; 0 is off
	Now      time.Time
	Data     any
}

// render writes a page. Rendering goes to a buffer first, so a template
// error becomes a clean 500 rather than half a page.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, page, title string, data any) {
	h.renderStatus(w, r, http.StatusOK, page, title, data)
}

func (h *Handler) renderStatus(w http.ResponseWriter, r *http.Request, status int, page, title string, data any) {
	v := view{
		Title: title, Page: page, Base: info(r).base, Who: info(r).who,
		CSRF: h.csrfToken(w, r), ReadOnly: h.opts.ReadOnly, Now: time.Now(), Data: data,
	}
	if h.opts.RefreshInterval > 0 && page != "confirm" && page != "error" && page != "bulk" {
		v.Refresh = h.opts.RefreshInterval.Milliseconds()
	}
	var buf bytes.Buffer
	if err := h.pages.set[page].ExecuteTemplate(&buf, "layout", v); err != nil {
		h.logger.ErrorContext(r.Context(), "rendering a dashboard page failed", "page", page, logattr.Err, err)
		http.Error(w, "500 internal error: the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	// A write error is the client gone: nobody is left to tell.
	_, _ = buf.WriteTo(w)
}

// fail renders an error page with the status and the error's message.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	h.renderStatus(w, r, status, "error", http.StatusText(status), struct {
		Status int
		Msg    string
	}{status, err.Error()})
}

// internalError is what a page says when the store (or another part the
// operator cannot fix from the page) failed: what failed, never the
// driver's text, which the log has.
func internalError(what string) error {
	return fmt.Errorf("%s failed: the job store or the toggle file returned an error; the details are in the server log", what)
}

// serveAsset serves an embedded file, never a directory listing.
func serveAsset(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/assets/")
	if st, err := fs.Stat(assetFS, name); name == "" || err != nil || st.IsDir() {
		http.NotFound(w, r)
		return
	}
	http.ServeFileFS(w, r, assetFS, name)
}

// pageFunc loads a page's data, or fails with an error (a *badInput is a
// 400, ErrNotFound a 404).
type pageFunc func(r *http.Request) (title string, data any, err error)

func (h *Handler) page(fn pageFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		title, data, err := fn(r)
		var bad *badInput
		switch {
		case errors.As(err, &bad):
			h.fail(w, r, http.StatusBadRequest, err)
			return
		case errors.Is(err, twice.ErrJobNotFound), errors.Is(err, twicestore.ErrNotFound):
			h.fail(w, r, http.StatusNotFound, err)
			return
		case errors.Is(err, twice.ErrInvalidInput):
			h.fail(w, r, http.StatusBadRequest, err)
			return
		case err != nil:
			h.logger.ErrorContext(r.Context(), "loading a dashboard page failed", "path", r.URL.Path, logattr.Err, err)
			h.fail(w, r, http.StatusInternalServerError, internalError("loading the page "+r.URL.Path))
			return
		}
		h.render(w, r, pageOf(data), title, data)
	}
}

// pageNamer is implemented by every page's data: it names its template.
type pageNamer interface{ page() string }

func pageOf(data any) string {
	if p, ok := data.(pageNamer); ok {
		return p.page()
	}
	return "error"
}

var funcs = template.FuncMap{
	"ago":   ago,
	"stamp": stamp,
	"join":  strings.Join,
	"add":   func(a, b int) int { return a + b },
	"deref": func(b *bool) bool { return b != nil && *b },
	"brief": brief,
	"nonce": nonce,
	"lastError": func(j *twicetype.JobRow) string {
		if len(j.Errors) == 0 {
			return ""
		}
		return j.Errors[len(j.Errors)-1].Error
	},
}

// nonce is a random id for a form whose resubmission must not act twice.
func nonce() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// briefRunes is how much of an error a listing shows.
const briefRunes = 160

// brief is the first line of s, cut to briefRunes with an ellipsis: a
// listing shows what went wrong at a glance, and the job page has the
// whole stored text. Without it a page of jobs that failed with a
// megabyte of error each is a page of tens of megabytes.
func brief(s string) string {
	line, rest, more := strings.Cut(strings.TrimSpace(s), "\n")
	line = strings.TrimSpace(line)
	cut := more && strings.TrimSpace(rest) != ""
	if len(line) > briefRunes { // fewer bytes are fewer runes
		n := 0
		for i := range line {
			if n == briefRunes {
				line, cut = line[:i], true
				break
			}
			n++
		}
	}
	if cut {
		line += " …"
	}
	return line
}

// stamp formats a time for a table cell, "-" when zero.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// ago says how long ago (or, negative, how far ahead) t is, roughly.
func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t)
	suffix := " ago"
	if d < 0 {
		d, suffix = -d, " from now"
	}
	switch {
	case d < time.Second:
		return "now"
	case d < time.Minute:
		return fmt.Sprintf("%ds%s", int(d.Seconds()), suffix)
	case d < time.Hour:
		return fmt.Sprintf("%dm%s", int(d.Minutes()), suffix)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%s", int(d.Hours()), suffix)
	}
	return fmt.Sprintf("%dd%s", int(d.Hours()/24), suffix)
}
