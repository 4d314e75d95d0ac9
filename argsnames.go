package twice

import (
	"strings"
	"unicode"
)

// sensitiveNames is the payload policy's table of names that mean a secret
// or personal data. Field names (Go and JSON) are split into lower-case
// words at case changes, digits and '_', '-', '.' or spaces (APIToken is
// "api token", user_name is "user name", JWTClaims is "jwt claims"), and a
// name is refused when its words contain an entry's words in a row, or one
// word spells the entry's words run together ("apikey", "username"). A
// word's plural counts as the word ("tokens").
//
// Matching words, not substrings, is what lets Cardinality, Wildcard,
// DiscardAfter and Pinned through while Card and PIN are refused. A name
// whose last word is an identifier or a measure (see qualifierWords:
// EmailID, PhoneCallID, TokenCount, PasswordLength) names data about the
// thing, not the thing, and is allowed, unless an entry ends at that last
// word itself (NationalID, TaxID are personal data).
//
// The list is deliberate: each entry is a secret (whoever reads it can act
// as someone) or personal data (it identifies or locates a person). A field
// it misses is still the user's responsibility; a field it wrongly refuses
// is tagged `twice:"allow"`.
var sensitiveNames = []sensitiveName{
	// Secrets.
	{"password", secretData, true},
	{"passwd", secretData, true},
	{"pwd", secretData, false},
	{"passphrase", secretData, true},
	{"secret", secretData, true},
	{"token", secretData, true},
	{"credential", secretData, true},
	{"api key", secretData, false},
	{"access key", secretData, false},
	{"private key", secretData, false},
	{"signing key", secretData, false},
	{"encryption key", secretData, false},
	{"session key", secretData, false},
	{"jwt", secretData, false},
	{"otp", secretData, false},
	{"totp", secretData, false},
	{"pin", secretData, false},
	{"cvv", secretData, false},
	{"cvc", secretData, false},
	{"bearer", secretData, false},
	{"cookie", secretData, false},
	{"authorization", secretData, false},
	{"auth header", secretData, false},
	// Personal data.
	{"email", personalData, false},
	{"e mail", personalData, false},
	{"mail address", personalData, false},
	{"phone", personalData, false},
	{"mobile number", personalData, false},
	{"msisdn", personalData, false},
	{"ssn", personalData, false},
	{"social security", personalData, false},
	{"national id", personalData, false},
	{"tax id", personalData, false},
	{"iban", personalData, false},
	{"card", personalData, false},
	{"passport", personalData, false},
	{"dob", personalData, false},
	{"birthdate", personalData, false},
	{"birth date", personalData, false},
	{"date of birth", personalData, false},
	{"birthday", personalData, false},
	{"full name", personalData, false},
	{"user name", personalData, false},
	{"first name", personalData, false},
	{"last name", personalData, false},
	{"given name", personalData, false},
	{"family name", personalData, false},
	{"middle name", personalData, false},
	{"maiden name", personalData, false},
	{"surname", personalData, false},
	{"home address", personalData, false},
	{"street address", personalData, false},
	{"postal address", personalData, false},
	{"mailing address", personalData, false},
	{"billing address", personalData, false},
	{"shipping address", personalData, false},
	{"ip", personalData, false},
	{"ip address", personalData, false},
	{"ip addr", personalData, false},
	{"mac address", personalData, false},
}

// qualifierWords end a name that holds an identifier or a measure of
// something rather than the thing: EmailID, TokenCount, PasswordLength.
var qualifierWords = map[string]bool{
	"id": true, "ids": true, "uuid": true, "guid": true,
	"count": true, "len": true, "length": true, "size": true,
	"type": true, "kind": true, "version": true,
}

const (
	secretData   = "a secret"
	personalData = "personal data"
)

// sensitiveName is one entry of sensitiveNames.
type sensitiveName struct {
	phrase string // words separated by one space
	what   string // secretData or personalData
	// suffix also matches the entry at the end of one longer word
	// ("resettoken", "clientsecret"): for words distinctive enough that no
	// harmless word ends in them.
	suffix bool
}

// sensitivePhrases are the entries of sensitiveNames split into words.
var sensitivePhrases = func() [][]string {
	p := make([][]string, len(sensitiveNames))
	for i, n := range sensitiveNames {
		p[i] = strings.Fields(n.phrase)
	}
	return p
}()

// sensitiveMatch is the entry a name matched.
type sensitiveMatch struct {
	phrase, what string
}

// sensitiveFieldName reports the first of names (a field's Go and JSON
// names) that looks like a secret or personal data, and the entry it
// matched.
func sensitiveFieldName(names ...string) (sensitiveMatch, bool) {
	for _, n := range names {
		if m, ok := matchSensitive(nameWords(n)); ok {
			return m, true
		}
	}
	return sensitiveMatch{}, false
}

// matchSensitive applies the table to a name's words.
func matchSensitive(words []string) (sensitiveMatch, bool) {
	if len(words) == 0 {
		return sensitiveMatch{}, false
	}
	last := len(words) - 1
	qualified := last > 0 && (qualifierWords[words[last]] || qualifierWords[strings.TrimSuffix(words[last], "s")])
	for end := range words {
		if qualified && end != last {
			continue // the name is about the thing: only an entry ending in the qualifier counts
		}
		for i, p := range sensitivePhrases {
			if phraseEndsAt(words, end, p, sensitiveNames[i].suffix) {
				return sensitiveMatch{phrase: sensitiveNames[i].phrase, what: sensitiveNames[i].what}, true
			}
		}
	}
	return sensitiveMatch{}, false
}

// phraseEndsAt reports whether phrase p's words end at words[end], either
// one word each or run together in words[end] alone.
func phraseEndsAt(words []string, end int, p []string, suffix bool) bool {
	w := words[end]
	joined := strings.Join(p, "")
	if sameWord(w, joined) || (suffix && len(w) > len(joined) && (strings.HasSuffix(w, joined) || strings.HasSuffix(w, joined+"s"))) {
		return true
	}
	start := end - len(p) + 1
	if len(p) == 1 || start < 0 {
		return false
	}
	for j, pw := range p {
		if !sameWord(words[start+j], pw) {
			return false
		}
	}
	return true
}

// sameWord reports whether w is word or its plural.
func sameWord(w, word string) bool {
	return w == word || w == word+"s"
}

// nameWords splits a Go or JSON field name into lower-case words: at '_',
// '-', '.', spaces and other non-alphanumerics, between a lower-case letter
// and an upper-case one (userName), before the last capital of an acronym
// followed by a lower-case word (APIToken: api, token) unless that is a
// plural's s (UserIDs: user, ids), and between letters and digits.
func nameWords(name string) []string {
	runes := []rune(name)
	var words []string
	start := -1
	flush := func(end int) {
		if start >= 0 && end > start {
			words = append(words, strings.ToLower(string(runes[start:end])))
		}
		start = -1
	}
	for i, r := range runes {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			flush(i)
			continue
		}
		if start < 0 {
			start = i
			continue
		}
		prev := runes[i-1]
		var boundary bool
		switch {
		case unicode.IsDigit(r) != unicode.IsDigit(prev):
			boundary = true
		case unicode.IsUpper(r) && unicode.IsLower(prev):
			boundary = true
		case unicode.IsUpper(r) && unicode.IsUpper(prev) && i+1 < len(runes) && unicode.IsLower(runes[i+1]):
			plural := runes[i+1] == 's' && (i+2 == len(runes) || !unicode.IsLower(runes[i+2]))
			boundary = !plural
		}
		if boundary {
			flush(i)
			start = i
		}
	}
	flush(len(runes))
	return words
}
