package twiceweb

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The checks every request passes before any page or action runs: its
// Host (DNS rebinding) and its input (text without NUL bytes).

// checkHost refuses a Host header that names neither this machine's
// loopback nor an allowed host, when the dashboard has no authentication
// or AllowedHosts is set.
func (h *Handler) checkHost(r *http.Request) error {
	if h.RequiresAuth() && len(h.opts.AllowedHosts) == 0 {
		return nil
	}
	host := hostName(r.Host)
	if host == "" {
		return errors.New("the request names no host: send a Host header such as localhost")
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	for _, a := range h.opts.AllowedHosts {
		a = strings.TrimSuffix(strings.ToLower(a), ".")
		if host == a || strings.HasPrefix(a, "*.") && strings.HasSuffix(host, a[1:]) {
			return nil
		}
	}
	if h.RequiresAuth() {
		return fmt.Errorf("host %q is not one of the dashboard's allowed hosts: use localhost or add it to twiceweb.Options.AllowedHosts", host)
	}
	return fmt.Errorf("host %q is not localhost or a loopback address, and this dashboard has no authentication, "+
		"so it answers only those (a page that rebinds its own name to this machine must not reach it): "+
		"open it as http://localhost or http://127.0.0.1, or add the name to twiceweb.Options.AllowedHosts, or configure authentication", host)
}

// hostName is the lower-case host of a Host header, without port,
// brackets or a trailing dot.
func hostName(hostport string) string {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// maxFormBytes bounds an action's form: the largest is a reason and a
// page of job ids.
const maxFormBytes = 64 << 10

// checkInput refuses a path, query or form that is not UTF-8 text without
// NUL bytes, before any page or action reads it: such bytes can only be a
// mistake or a probe, and PostgreSQL refuses them with an error that
// would otherwise surface as a 500.
func checkInput(w http.ResponseWriter, r *http.Request) error {
	if err := checkText("the path", r.URL.Path); err != nil {
		return err
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return errors.New("the query string is malformed: encode it as name=value pairs joined by &")
	}
	if err := checkValues("query parameter", q); err != nil {
		return err
	}
	if r.Method != http.MethodPost {
		return nil
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return fmt.Errorf("the form is larger than %d KiB: select fewer jobs at once", maxFormBytes>>10)
		}
		return errors.New("the form is malformed: submit it from a dashboard page")
	}
	return checkValues("form field", r.PostForm)
}

func checkValues(what string, vs url.Values) error {
	for name, values := range vs {
		if err := checkText(what+" name "+strconv.QuoteToASCII(name), name); err != nil {
			return err
		}
		for _, v := range values {
			if err := checkText(what+" "+strconv.Quote(name), v); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkText says what is wrong with s as dashboard input, or nil.
func checkText(what, s string) error {
	switch {
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%s contains a NUL byte: remove it (names, keys and reasons are plain text)", what)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not valid UTF-8: type it as text (names, keys and reasons are plain text)", what)
	}
	return nil
}
