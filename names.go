package twice

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Limits on the names and keys a job carries. They keep every value small
// enough for the stores' indexes (PostgreSQL refuses a B-tree entry over
// about 2.7 kB with an error no user should see) and short enough to show.
const (
	// MaxKindBytes is the longest kind name, in bytes.
	MaxKindBytes = 255
	// MaxQueueBytes is the longest queue name, in bytes.
	MaxQueueBytes = 128
	// MaxKeyBytes is the longest unique key, idempotency key, message id or
	// correlation id, in bytes: an identifier, not data (args are limited to
	// MaxArgsBytesDefault, and a key must not be a way around that).
	MaxKeyBytes = 512
)

// kindPattern is <segment>(.<segment>)*.v<N>, lower case.
var kindPattern = regexp.MustCompile(`^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*\.v[1-9][0-9]*$`)

// queuePattern is the queue naming rule: lower-case letters, digits, '_',
// '-' and '.', starting with a letter or digit ("default", "emails.bulk",
// "tenant-42"). Queue names appear in URLs, metric labels and log lines, so
// they are kept to characters that need no escaping anywhere.
var queuePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)

// ValidateKind checks a kind name against the versioned naming rule:
// dot-separated lower-case segments ending in a version, like
// "email.welcome.v1", at most MaxKindBytes long.
func ValidateKind(kind string) error {
	if err := checkText("job kind", kind, MaxKindBytes); err != nil {
		return err
	}
	if kindPattern.MatchString(kind) {
		return nil
	}
	switch {
	case kind == "":
		return fmt.Errorf("job kind is empty: name it like \"email.welcome.v1\"")
	case strings.ToLower(kind) != kind:
		return fmt.Errorf("job kind %q has upper-case letters: use %q", kind, strings.ToLower(kind))
	case !regexp.MustCompile(`\.v[0-9]+$`).MatchString(kind):
		return fmt.Errorf("job kind %q is not versioned: end it with .v1", kind)
	case strings.HasSuffix(kind, ".v0"):
		return fmt.Errorf("job kind %q has version 0: versions start at .v1", kind)
	}
	return fmt.Errorf("job kind %q is malformed: use dot-separated lower-case segments "+
		"(letters, digits, '-', '_', each starting with a letter) ending in a version, like \"email.welcome.v1\"", kind)
}

// ValidateQueue checks a queue name: 1 to MaxQueueBytes lower-case letters,
// digits, '_', '-' or '.', starting with a letter or digit, like "default",
// "emails.bulk" or "tenant-42".
func ValidateQueue(queue string) error {
	if queue == "" {
		return fmt.Errorf("queue name is empty: name it like %q", QueueDefault)
	}
	if err := checkText("queue name", queue, MaxQueueBytes); err != nil {
		return err
	}
	if queuePattern.MatchString(queue) {
		return nil
	}
	if strings.ToLower(queue) != queue {
		return fmt.Errorf("queue name %q has upper-case letters: use %q", queue, strings.ToLower(queue))
	}
	return fmt.Errorf("queue name %q is malformed: use lower-case letters, digits, '_', '-' and '.', "+
		"starting with a letter or digit, like \"emails.bulk\"", queue)
}

// ValidateKey checks a key a job carries (EnqueueOpts.UniqueKey and
// MessageID, an IdempotencyKey, a correlation id): valid UTF-8 without NUL
// bytes, at most MaxKeyBytes long. what names the key in the error.
func ValidateKey(what, key string) error {
	return checkText(what, key, MaxKeyBytes)
}

// checkText refuses what the stores cannot hold or tools cannot show:
// invalid UTF-8 and NUL bytes (PostgreSQL refuses both in text columns
// with its own error; C tools and terminals cut a value at a NUL) and
// values over limit bytes. The value is quoted, cut short, in the error.
func checkText(what, s string, limit int) error {
	switch {
	case !utf8.ValidString(s):
		return fmt.Errorf("%s %s is not valid UTF-8: use UTF-8 text", what, shortQuote(s))
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%s %s contains a NUL byte: remove it", what, shortQuote(s))
	case len(s) > limit:
		return fmt.Errorf("%s %s is %d bytes, over the %d-byte limit: use a shorter one", what, shortQuote(s), len(s), limit)
	}
	return nil
}

// shortQuote quotes s for an error message, cut to a readable length:
// a 10,000-character name must not make a 10,000-character error.
func shortQuote(s string) string {
	const maxQuoted = 40
	if len(s) <= maxQuoted {
		return fmt.Sprintf("%q", s)
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q…", s[:cut])
}
