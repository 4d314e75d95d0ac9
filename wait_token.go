package twice

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Wait tokens let a third party signal a waiting job without a twice
// credential: the handler mints one for a wait (WaitToken) and hands it
// out as part of a callback URL; whoever holds it can send that one
// signal to that one job (Client.SignalByToken, or the dashboard's
// POST /api/v1/signals/{token}) until it expires. A token is the job's
// id, the wait's name and the expiry, signed with Config.WaitTokenKey
// (HMAC-SHA256): it cannot be guessed or altered, and nothing is stored
// for it. It is single-use as the wait is: the first signal resolves the
// wait, and every later use is a duplicate that changes nothing.

// minWaitTokenKeyBytes is the shortest Config.WaitTokenKey: an HMAC key
// as long as its hash.
const minWaitTokenKeyBytes = 32

// waitTokenPrefix starts every wait token and names its version.
const waitTokenPrefix = "tww1."

// ErrWaitTokenInvalid means a wait token is malformed, altered, or signed
// with another key (usage). It says nothing of the job, so a guess
// learns nothing.
var ErrWaitTokenInvalid error = &inputError{msg: "wait token invalid"}

// ErrWaitTokenExpired means a wait token's expiry has passed: ask for a
// new one (the handler mints one on its next run).
var ErrWaitTokenExpired = errors.New("wait token expired")

// waitClaims is what a wait token carries.
type waitClaims struct {
	JobID   int64  `json:"j"`
	Name    string `json:"n"`
	Expires int64  `json:"e,omitempty"` // Unix seconds; 0 for never
}

// WaitToken returns a token that signals the wait name of the job whose
// handler ctx is, valid for ttl (NoTimeout: for ever). Hand it to the
// party that answers (a payment provider's callback URL, an approval
// link); Client.SignalByToken takes it back. It needs
// Config.WaitTokenKey.
func WaitToken(ctx context.Context, name string, ttl time.Duration) (string, error) {
	r := runFrom(ctx)
	if r == nil {
		return "", fmt.Errorf("twice: WaitToken %q: call it with a handler's context: %w", name, ErrNotInHandler)
	}
	if err := checkWaitName(name); err != nil {
		return "", err
	}
	if len(r.waitTokenKey) == 0 {
		return "", invalidf("twice: WaitToken %q: set Config.WaitTokenKey (at least %d random bytes, the same in every process) to sign wait tokens",
			name, minWaitTokenKeyBytes)
	}
	if ttl <= 0 {
		return "", invalidf("twice: WaitToken %q: the ttl is %s; give a positive one, or twice.NoTimeout", name, ttl)
	}
	c := waitClaims{JobID: r.row.ID, Name: name}
	if ttl != NoTimeout {
		c.Expires = time.Now().Add(ttl).Unix()
	}
	return signWaitToken(r.waitTokenKey, c), nil
}

func signWaitToken(key []byte, c waitClaims) string {
	body, _ := json.Marshal(c) // an int64, a string and an int64 always marshal
	b64 := base64.RawURLEncoding.EncodeToString(body)
	return waitTokenPrefix + b64 + "." + base64.RawURLEncoding.EncodeToString(waitTokenMAC(key, b64))
}

func waitTokenMAC(key []byte, b64 string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(waitTokenPrefix + b64))
	return m.Sum(nil)
}

// parseWaitToken checks a token's signature and expiry at now and
// returns what it carries.
func parseWaitToken(key []byte, token string, now time.Time) (*waitClaims, error) {
	rest, ok := strings.CutPrefix(token, waitTokenPrefix)
	b64, sig, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || len(token) > 1024 {
		return nil, ErrWaitTokenInvalid
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, waitTokenMAC(key, b64)) {
		return nil, ErrWaitTokenInvalid
	}
	body, err := base64.RawURLEncoding.DecodeString(b64)
	if err != nil {
		return nil, ErrWaitTokenInvalid
	}
	var c waitClaims
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil || c.JobID <= 0 || c.Name == "" {
		return nil, ErrWaitTokenInvalid
	}
	if c.Expires != 0 && now.Unix() >= c.Expires {
		return nil, fmt.Errorf("%w at %s: the job's handler mints a new one when it runs again",
			ErrWaitTokenExpired, time.Unix(c.Expires, 0).UTC().Format(time.RFC3339))
	}
	return &c, nil
}

// SignalByToken sends the signal a wait token names (WaitToken) with
// payload, as Signal does: once per wait, a duplicate reported as such.
// A token that is malformed, altered or signed with another key is
// refused with ErrWaitTokenInvalid, an expired one with
// ErrWaitTokenExpired; the payload is checked as Signal's. by names the
// sender for the record. The result's JobID and Name say what the token
// named.
func (c *Client) SignalByToken(ctx context.Context, token string, payload any, by string) (*SignalResult, error) {
	if len(c.cfg.WaitTokenKey) == 0 {
		return nil, invalidf("twice: signal by wait token: this client has no Config.WaitTokenKey to check tokens with")
	}
	claims, err := parseWaitToken(c.cfg.WaitTokenKey, token, c.now())
	if err != nil {
		return nil, fmt.Errorf("twice: signal by wait token: %w", err)
	}
	return c.Signal(ctx, &SignalParams{JobID: claims.JobID, Name: claims.Name, Payload: payload, By: by})
}
