// Package twicehttp is net/http middleware for the Idempotency-Key request
// header (IETF draft-ietf-httpapi-idempotency-key-header), storing its
// records in a twice store (KeyStore: twicesqlite's or twicepg's).
//
// The first request with a key takes it, runs the handler once and stores
// the response (status, headers, body). A retry with the same key and the
// same request (method, path with query, body) gets the stored response
// back, marked with "Idempotent-Replayed: true", and the handler does not
// run. Records are scoped by principal and key, so one user never sees
// another's response. Stored responses carry an "Idempotency-Key-Expires"
// header (an HTTP date) saying until when the key is remembered.
//
// While the handler runs, its key's lock is refreshed every third of
// Options.LockTimeout, so a slow handler keeps its key; only a request
// whose process died loses it, LockTimeout after its last refresh, to a
// retry of the same request (never to a different one).
//
// The response reaches the client as the handler writes it. A copy is
// stored, up to Options.MaxResponseBytes of body; a larger response is
// recorded as not replayable (a retry gets 409 response-not-stored and the
// handler does not run again). Set-Cookie and the headers named in
// Options.DropHeaders are never stored, so never replayed.
//
// It composes with twice's job markers: the middleware stops a retried
// request from enqueueing a job twice, the marker stops a job's effect from
// happening twice.
//
// # Errors
//
// Every error the middleware answers itself is an application/problem+json
// body (RFC 9457) with type, title, status and detail; the detail says what
// to do. None of them is stored: a retry of the request is judged afresh.
//
//   - 400 idempotency-key-missing: the route requires the header.
//   - 400 idempotency-key-invalid: the key is not a quoted string or token
//     of 1 to 255 characters.
//   - 400 request-body-unreadable: the body could not be read.
//   - 401 principal-unknown: Options.Principal refused the request.
//   - 409 request-in-progress: the first request with the key still runs;
//     retry after the Retry-After delay.
//   - 409 response-not-stored: the request with the key ran, but its
//     response was larger than Options.MaxResponseBytes and was not kept;
//     the problem's original_status member is the status it was answered
//     with. Do not resend it: read the outcome from the resource.
//   - 413 request-body-too-large: the body exceeds Options.MaxBodyBytes.
//   - 422 idempotency-key-reused: the key was used for a different request;
//     use a new key for a new request.
//   - 503 idempotency-store-unavailable: the record could not be read or
//     written; retry with the same key.
package twicehttp
