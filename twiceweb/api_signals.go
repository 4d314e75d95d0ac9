package twiceweb

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/twicejobs/twice"
)

// signalPathPrefix is the wait-token route's path: whoever holds a wait
// token may post to it without an API token (the token is the
// credential), so ServeHTTP lets it through before authentication.
const signalPathPrefix = "/api/v1/signals/"

// signalResponse is what a signal route answers.
type signalResponse struct {
	JobID     int64           `json:"job_id"`
	Name      string          `json:"name"`
	Woke      bool            `json:"woke"`
	Duplicate bool            `json:"duplicate"`
	Existing  *signalExisting `json:"existing,omitempty"`
}

// signalExisting is a wait's earlier resolution, when a signal was a
// duplicate.
type signalExisting struct {
	TimedOut bool      `json:"timed_out"`
	At       time.Time `json:"at"`
	Sender   string    `json:"sender,omitempty"`
}

func signalJSON(res *twice.SignalResult) signalResponse {
	out := signalResponse{JobID: res.JobID, Name: res.Name, Woke: res.Woke, Duplicate: res.Duplicate}
	if e := res.Existing; e != nil {
		out.Existing = &signalExisting{TimedOut: e.TimedOut, At: e.At, Sender: e.Sender}
	}
	return out
}

// signalJob sends the path's job the signal {name} with the body, any one
// JSON value (an empty body is null), as the API token's caller.
func (a *api) signalJob(r *http.Request, c *caller) (int, any, error) {
	id, err := pathID(r)
	if err != nil {
		return 0, nil, err
	}
	payload, err := readPayload(r)
	if err != nil {
		return 0, nil, err
	}
	res, err := a.h.client.Signal(r.Context(), &twice.SignalParams{JobID: id, Name: r.PathValue("name"), Payload: payload, By: c.name})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, signalJSON(res), nil
}

// signalByToken sends the signal a wait token names with the body: the
// callback a handler handed out (twice.WaitToken). The sender recorded is
// "wait-token".
func (a *api) signalByToken(r *http.Request, _ *caller) (int, any, error) {
	payload, err := readPayload(r)
	if err != nil {
		return 0, nil, err
	}
	res, err := a.h.client.SignalByToken(r.Context(), r.PathValue("token"), payload, "wait-token")
	switch {
	case errors.Is(err, twice.ErrWaitTokenExpired):
		return 0, nil, &problem{Type: "wait-token-expired", Title: "Wait token expired", Status: http.StatusGone, Detail: err.Error()}
	case errors.Is(err, twice.ErrWaitTokenInvalid):
		return 0, nil, &problem{Type: "wait-token-invalid", Title: "Wait token invalid", Status: http.StatusNotFound,
			Detail: "this URL's wait token is not one this server signed: check the URL you were given"}
	case err != nil:
		return 0, nil, err
	}
	return http.StatusOK, signalJSON(res), nil
}

// readPayload reads a signal's body as every JSON route does
// (readJSONBody): one JSON value; an empty body is null. The payload
// policy (its size cap, no secret-looking keys) is the library's.
func readPayload(r *http.Request) (json.RawMessage, error) {
	body, err := readJSONBody(r)
	switch {
	case err != nil:
		return nil, err
	case body == nil:
		return json.RawMessage("null"), nil
	case !json.Valid(body):
		return nil, badRequest("the request body is not one JSON value: send JSON, such as {\"approved\": true}")
	}
	return json.RawMessage(body), nil
}
