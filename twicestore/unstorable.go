package twicestore

import "errors"

// ErrUnstorable means the database refused a value of a write as data it
// can never hold: on PostgreSQL a data exception (SQLSTATE class 22: a NUL
// byte in text, bytes that are not UTF-8, "\u0000" in jsonb, a number out
// of range) or a program limit (54000: an index row too large); on SQLite
// a value too big or of the wrong type. The same write fails the same way
// on every try, so a caller must not retry it as it is: change the value
// (twice's completer writes a storable outcome in its place), or report
// it. Drivers wrap such errors with Unstorable; errors.Is finds the
// sentinel, and the driver's own error stays in the chain.
var ErrUnstorable = errors.New("twicestore: the database cannot store a value of this write")

// Unstorable returns err marked as ErrUnstorable, with err's message
// unchanged; nil stays nil.
func Unstorable(err error) error {
	if err == nil || errors.Is(err, ErrUnstorable) {
		return err
	}
	return &unstorableError{err: err}
}

type unstorableError struct{ err error }

func (e *unstorableError) Error() string        { return e.err.Error() }
func (e *unstorableError) Unwrap() error        { return e.err }
func (e *unstorableError) Is(target error) bool { return target == ErrUnstorable }
