package twicehttp

import (
	"bytes"
	"net/http"
)

// captureWriter writes the response through to the client as the handler
// writes it, and keeps a copy (status, headers as they were when the header
// was written, body up to a cap) to store for replays. Past the cap the
// copy is dropped: the client still gets every byte, but memory stays
// bounded and the response is not stored for replay.
type captureWriter struct {
	http.ResponseWriter
	max         int64 // the largest body kept
	wroteHeader bool
	status      int
	header      http.Header
	body        bytes.Buffer
	written     int64 // bytes the handler wrote, kept or not
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

// Write sends b to the client and keeps a copy of it while the body fits
// in max, even when the client has gone away, so the response is stored
// for the retry that client will make.
func (c *captureWriter) Write(b []byte) (int, error) {
	if !c.wroteHeader {
		c.WriteHeader(http.StatusOK)
	}
	c.written += int64(len(b))
	switch {
	case c.written <= c.max:
		c.body.Write(b)
	case c.body.Cap() > 0:
		c.body = bytes.Buffer{} // too large to store: free the copy now
	}
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

// tooLarge reports that the body outgrew max, so no copy of it is kept.
func (c *captureWriter) tooLarge() bool { return c.written > c.max }

// result is the response to store: a handler that wrote nothing answered
// 200 with no body, as net/http does.
func (c *captureWriter) result() (int, http.Header, []byte) {
	if !c.wroteHeader {
		return http.StatusOK, c.ResponseWriter.Header().Clone(), nil
	}
	return c.status, c.header, c.body.Bytes()
}
