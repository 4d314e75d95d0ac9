package twice

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestParseWaitToken: a token reads back as signed, and any change to it,
// another key, or its expiry refuses it, saying nothing of the job.
func TestParseWaitToken(t *testing.T) {
	key := []byte(strings.Repeat("k", 32))
	now := time.Unix(1_800_000_000, 0)
	good := signWaitToken(key, waitClaims{JobID: 42, Name: "paid", Expires: now.Add(time.Hour).Unix()})
	c, err := parseWaitToken(key, good, now)
	if err != nil || c.JobID != 42 || c.Name != "paid" {
		t.Fatalf("parse of a good token = %+v, %v", c, err)
	}
	forever := signWaitToken(key, waitClaims{JobID: 42, Name: "paid"})
	if _, err := parseWaitToken(key, forever, now.Add(100*365*24*time.Hour)); err != nil {
		t.Fatalf("a token with no expiry: %v", err)
	}
	altered := signWaitToken(key, waitClaims{JobID: 43, Name: "paid", Expires: now.Add(time.Hour).Unix()})
	body := strings.Split(altered, ".")[1]
	sig := strings.Split(good, ".")[2]
	for name, tok := range map[string]string{
		"another job's body with this signature": waitTokenPrefix + body + "." + sig,
		"another key":                            signWaitToken([]byte(strings.Repeat("x", 32)), waitClaims{JobID: 42, Name: "paid"}),
		"no prefix":                              strings.TrimPrefix(good, waitTokenPrefix),
		"cut short":                              good[:len(good)-3],
		"empty":                                  "",
		"not base64":                             waitTokenPrefix + "!!!." + sig,
		"huge":                                   waitTokenPrefix + strings.Repeat("a", 2000) + "." + sig,
		"no job":                                 signWaitToken(key, waitClaims{}),
	} {
		if _, err := parseWaitToken(key, tok, now); !errors.Is(err, ErrWaitTokenInvalid) || !errors.Is(err, ErrInvalidInput) {
			t.Errorf("%s: parse = %v, want ErrWaitTokenInvalid", name, err)
		}
	}
	if _, err := parseWaitToken(key, good, now.Add(time.Hour)); !errors.Is(err, ErrWaitTokenExpired) {
		t.Fatalf("an expired token: %v, want ErrWaitTokenExpired", err)
	}
}
