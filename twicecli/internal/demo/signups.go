package demo

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicehttp"
)

// HTTPAddrDefault is where Run serves the demo's HTTP API unless told
// otherwise.
const HTTPAddrDefault = "127.0.0.1:8080"

// signupRequest is the body of POST /signups.
type signupRequest struct {
	Name       string `json:"name"`
	BonusCents int64  `json:"bonus_cents"`
}

// signupResponse is what POST /signups answers, and what a retry replays.
type signupResponse struct {
	UserID      int64 `json:"user_id"`
	EmailJobID  int64 `json:"email_job_id"`
	CreditID    int64 `json:"credit_id,omitempty"`
	CreditJobID int64 `json:"credit_job_id,omitempty"`
}

// userResponse is what GET /users/{id} answers.
type userResponse struct {
	ID         int64  `json:"id"`
	Name       string `json:"name"`
	Email      string `json:"email"`
	EmailsSent int    `json:"emails_sent"`
}

// signupName is what a demo user's name may be: it becomes the local part
// of the user's example.com address.
var signupName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// maxBonusCents bounds the signup bonus the API grants.
const maxBonusCents = 100_00

// Handler is the demo's HTTP API:
//
//   - POST /signups, guarded by the Idempotency-Key middleware (the key is
//     required): it creates the user and, in the same transaction,
//     enqueues the verification email (and the bonus credit), so a retried
//     request replays the first response instead of signing up twice, and
//     the email's marker keeps a redelivered job from sending twice;
//   - GET /users/{id}: the user and how many verification emails the sink
//     received for them.
//
// The demo has no accounts, so every request is one principal; a real
// application returns the authenticated caller's id.
func (a *App) Handler(c *twice.Client) http.Handler {
	mux := http.NewServeMux()
	idempotent := twicehttp.Middleware(a.store, twicehttp.Options{
		Principal:    func(*http.Request) (string, error) { return "demo", nil },
		Required:     true,
		MaxBodyBytes: 4 << 10,
		// A failed signup rolled its whole transaction back: nothing
		// happened, so the key is given back and a retry runs again.
		ReleaseServerErrors: true,
	})
	mux.Handle("POST /signups", idempotent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.postSignup(w, r, c)
	})))
	mux.HandleFunc("GET /users/{id}", a.getUser)
	return mux
}

func (a *App) postSignup(w http.ResponseWriter, r *http.Request, c *twice.Client) {
	var req signupRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeProblem(w, http.StatusBadRequest, "malformed signup",
			fmt.Sprintf("the body must be a JSON object like {\"name\": \"ada\", \"bonus_cents\": 500}: %v", err))
		return
	}
	switch {
	case !signupName.MatchString(req.Name):
		writeProblem(w, http.StatusUnprocessableEntity, "invalid name",
			fmt.Sprintf("name %q must be 1 to 64 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit", req.Name))
		return
	case req.BonusCents < 0 || req.BonusCents > maxBonusCents:
		writeProblem(w, http.StatusUnprocessableEntity, "invalid bonus",
			fmt.Sprintf("bonus_cents %d must be between 0 and %d", req.BonusCents, maxBonusCents))
		return
	}
	s, err := a.Signup(r.Context(), c, req.Name, req.BonusCents)
	if err != nil {
		twice.Logger(r.Context()).ErrorContext(r.Context(), "signup failed", "err", err)
		writeProblem(w, http.StatusInternalServerError, "signup failed", "the user was not created and no email was enqueued; retry the request")
		return
	}
	resp := signupResponse{UserID: s.UserID, EmailJobID: s.Email.ID, CreditID: s.CreditID}
	if s.Credit != nil {
		resp.CreditJobID = s.Credit.ID
	}
	w.Header().Set("Location", "/users/"+strconv.FormatInt(s.UserID, 10))
	writeJSON(w, http.StatusCreated, resp)
}

func (a *App) getUser(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		writeProblem(w, http.StatusBadRequest, "invalid user id", fmt.Sprintf("%q is not a user id: use the user_id POST /signups answered", r.PathValue("id")))
		return
	}
	u := userResponse{ID: id}
	err = a.db.QueryRowContext(r.Context(), a.q(`SELECT name, email,
		(SELECT count(*) FROM demo_outbox o WHERE o.user_id = u.id)
		FROM demo_users u WHERE id = $1`), id).Scan(&u.Name, &u.Email, &u.EmailsSent)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		writeProblem(w, http.StatusNotFound, "no such user", fmt.Sprintf("user %d does not exist", id))
		return
	case err != nil:
		writeProblem(w, http.StatusInternalServerError, "lookup failed", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, u)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeProblem answers an RFC 9457 problem document, as the middleware's
// own errors are.
func writeProblem(w http.ResponseWriter, status int, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type": "about:blank", "title": title, "status": status, "detail": strings.TrimSpace(detail),
	})
}
