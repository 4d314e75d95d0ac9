package twice

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/twicejobs/twice/internal/freetext"
)

// Limits on the names and keys a job carries: small enough for the
// stores' indexes, and short enough to show.
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
// invalid UTF-8, NUL bytes and values over limit bytes. It is
// freetext.Check, the one rule for free text, under the name this
// package's validators have always called.
func checkText(what, s string, limit int) error {
	return freetext.Check(what, s, limit)
}
