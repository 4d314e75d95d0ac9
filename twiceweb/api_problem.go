package twiceweb

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
)

// problemTypeBase prefixes the type of every problem the API answers;
// the name that follows it is the problem's short type ("job-not-found").
const problemTypeBase = "https://pkg.go.dev/github.com/twicejobs/twice/twiceweb#problem-"

// problem is an RFC 9457 problem details body, and an error an apiFunc
// returns to answer with it.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	// allow is the Allow header of a 405.
	allow string
}

func (p *problem) Error() string { return p.Detail }

func badRequest(detail string) *problem {
	return &problem{Type: "invalid-request", Title: "Invalid request", Status: http.StatusBadRequest, Detail: detail}
}

// notFound is a path's resource that does not exist: a 404 with err's
// message, where problemFor would make the library's usage error a 422.
type notFound struct{ err error }

func (e *notFound) Error() string { return e.err.Error() }
func (e *notFound) Unwrap() error { return e.err }

// problemFor maps an apiFunc's error to its problem: the library's usage
// class (the caller's input) to 4xx, the job's state to 409, anything
// else (the database) to 500 with no detail of its own.
func problemFor(err error) *problem {
	var p *problem
	var nf *notFound
	switch {
	case errors.As(err, &p):
		return p
	case errors.Is(err, twice.ErrJobNotFound):
		return &problem{Type: "job-not-found", Title: "Job not found", Status: http.StatusNotFound, Detail: err.Error()}
	case errors.As(err, &nf):
		return &problem{Type: "not-found", Title: "Not found", Status: http.StatusNotFound, Detail: err.Error()}
	case errors.Is(err, twice.ErrJobFinished), errors.Is(err, twice.ErrJobRunning), errors.Is(err, twice.ErrJobNotRetryable),
		errors.Is(err, twice.ErrJobNotDead), errors.Is(err, twice.ErrUniqueConflict):
		return &problem{Type: "job-state-conflict", Title: "Job state conflict", Status: http.StatusConflict, Detail: err.Error()}
	case errors.Is(err, twice.ErrUnknownKind):
		return &problem{Type: "unknown-kind", Title: "Unknown kind", Status: http.StatusUnprocessableEntity, Detail: err.Error()}
	case errors.Is(err, twice.ErrInvalidArgs):
		return &problem{Type: "invalid-args", Title: "Invalid job args", Status: http.StatusUnprocessableEntity, Detail: err.Error()}
	case errors.Is(err, twice.ErrInvalidInput):
		return &problem{Type: "invalid-input", Title: "Invalid input", Status: http.StatusUnprocessableEntity, Detail: err.Error()}
	case errors.Is(err, twicestore.ErrUnstorable):
		// A value the library let through and the database refused: still
		// the caller's input, and the same on every try.
		return &problem{Type: "unstorable", Title: "Value cannot be stored", Status: http.StatusUnprocessableEntity,
			Detail: "the database refused a value of this request as data it cannot hold: check the text fields and args for control characters or huge numbers"}
	}
	return &problem{Type: "internal", Title: "Internal server error", Status: http.StatusInternalServerError,
		Detail: "the server could not complete the request (the error is in its log): retry later"}
}

// writeProblem answers with p as application/problem+json.
func writeProblem(w http.ResponseWriter, p *problem) {
	out := *p
	out.Type = problemTypeBase + p.Type
	body, _ := json.Marshal(out) // strings and an int always marshal
	h := w.Header()
	if p.allow != "" {
		h.Set("Allow", p.allow)
	}
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}
