package twicehttp

import (
	"bytes"
	"net/http"
)

// captureWriter writes the response through to the client and keeps a copy
// of it (status, headers as they were when the header was written, body) to
// store for replays.
type captureWriter struct {
	http.ResponseWriter
	wroteHeader bool
	status      int
	header      http.Header
	body        bytes.Buffer
}

// WriteHeader records the status and a snapshot of the headers: what the
// client received, not what the handler sets afterwards.
func (c *captureWriter) WriteHeader(status int) {
	if !c.wroteHeader && status >= 200 {
		c.wroteHeader = true
		c.status = status
		c.header = c.ResponseWriter.Header().Clone()
	}
	c.ResponseWriter.WriteHeader(status)
}

// Write keeps a copy of b, even when the client has gone away, so the
// response is stored for the retry that client will make.
func (c *captureWriter) Write(b []byte) (int, error) {
	if !c.wroteHeader {
		c.WriteHeader(http.StatusOK)
	}
	c.body.Write(b)
	return c.ResponseWriter.Write(b)
}

// Flush sends what was written so far, for handlers that assert
// http.Flusher; the copy is unaffected.
func (c *captureWriter) Flush() {
	if !c.wroteHeader {
		c.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(c.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the client's writer.
func (c *captureWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// result is the response to store: a handler that wrote nothing answered
// 200 with no body, as net/http does.
func (c *captureWriter) result() (int, http.Header, []byte) {
	if !c.wroteHeader {
		return http.StatusOK, c.ResponseWriter.Header().Clone(), nil
	}
	return c.status, c.header, c.body.Bytes()
}
