package twicehttp

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// problemTypeBase prefixes every problem type; the package doc lists them
// all under "Errors", by the name that follows the prefix.
const problemTypeBase = "https://pkg.go.dev/github.com/twicejobs/twice/twicehttp#problem-"

// problem is an RFC 9457 problem details body.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	// OriginalStatus is, for response-not-stored, the status the request
	// that ran was answered with (an RFC 9457 extension member).
	OriginalStatus int `json:"original_status,omitempty"`
}

// The problems the middleware answers with.
var (
	problemKeyMissing = problem{Type: problemTypeBase + "idempotency-key-missing", Title: "Idempotency-Key header missing", Status: http.StatusBadRequest,
		Detail: `this endpoint requires an Idempotency-Key header: generate a unique key (a UUID, for example) per operation, send it as Idempotency-Key: "<key>", and reuse it only when retrying the same request`}
	problemKeyInvalid = problem{Type: problemTypeBase + "idempotency-key-invalid", Title: "Idempotency-Key header invalid", Status: http.StatusBadRequest,
		Detail: errKeyInvalid.Error()}
	problemBodyUnreadable = problem{Type: problemTypeBase + "request-body-unreadable", Title: "Request body unreadable", Status: http.StatusBadRequest,
		Detail: "the request body could not be read in full; retry the request with the same Idempotency-Key"}
	problemPrincipal = problem{Type: problemTypeBase + "principal-unknown", Title: "Principal unknown", Status: http.StatusUnauthorized,
		Detail: "idempotency keys are kept per caller, and this request's caller could not be identified: authenticate, then retry with the same Idempotency-Key"}
	problemInProgress = problem{Type: problemTypeBase + "request-in-progress", Title: "Request in progress", Status: http.StatusConflict,
		Detail: "a request with this Idempotency-Key is still being processed: retry the same request with the same key after the Retry-After delay to get its response"}
	problemBodyTooLarge = problem{Type: problemTypeBase + "request-body-too-large", Title: "Request body too large", Status: http.StatusRequestEntityTooLarge,
		Detail: "the request body exceeds the size this endpoint accepts with an Idempotency-Key; send a smaller body"}
	problemKeyReused = problem{Type: problemTypeBase + "idempotency-key-reused", Title: "Idempotency-Key reused", Status: http.StatusUnprocessableEntity,
		Detail: "this Idempotency-Key was already used for a different request (method, path or body differ): use a new key for a new request, or resend the original request unchanged"}
	problemNotStored = problem{Type: problemTypeBase + "response-not-stored", Title: "Response not stored", Status: http.StatusConflict,
		Detail: "the request with this Idempotency-Key already ran, with the status given as original_status, but its response was too large to keep for replay: do not send it again; read the outcome from the resource it acted on"}
	problemStore = problem{Type: problemTypeBase + "idempotency-store-unavailable", Title: "Idempotency store unavailable", Status: http.StatusServiceUnavailable,
		Detail: "the idempotency record for this key could not be read or written; retry the same request with the same Idempotency-Key"}
)

// writeProblem answers with p as application/problem+json.
func writeProblem(w http.ResponseWriter, p problem) {
	body, _ := json.Marshal(p) // a struct of strings and an int always marshals
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}
