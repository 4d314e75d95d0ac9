package enqueuecases

import (
	"errors"

	"github.com/twicejobs/twice"
)

// Class is why an enqueue is refused. Each class maps to the Go sentinel
// error EnqueueJSON's error wraps and to the SQLSTATE twice_enqueue
// raises (or PostgreSQL raises before it runs).
type Class string

// The refusal classes.
const (
	// InvalidKind: the kind is empty, malformed, unversioned or too long.
	InvalidKind Class = "InvalidKind"
	// UnknownKind: no catalog entry holds the kind and it is not forced.
	UnknownKind Class = "UnknownKind"
	// ArgsNotObject: the args are absent or a JSON value other than an
	// object.
	ArgsNotObject Class = "ArgsNotObject"
	// MalformedJSON: the args are not JSON at all; PostgreSQL refuses
	// them as jsonb input before the function runs.
	MalformedJSON Class = "MalformedJSON"
	// UnknownField: a key the kind's published fields do not list.
	UnknownField Class = "UnknownField"
	// WrongType: a value not of its published field's JSON type.
	WrongType Class = "WrongType"
	// NestedObject: a value that is an object or holds one.
	NestedObject Class = "NestedObject"
	// DuplicateKey: a key given twice in the args.
	DuplicateKey Class = "DuplicateKey"
	// SecretField: a key that looks like a secret or personal data, for
	// a kind without published fields; the case's Says names the key.
	SecretField Class = "SecretField"
	// TooLarge: the compacted args are over twice.MaxArgsBytesDefault.
	TooLarge Class = "TooLarge"
	// BadOption: an option out of range (a negative delay, max attempts
	// below 1, run_at not a time, run_at and delay both given).
	BadOption Class = "BadOption"
	// UnknownOption: opts that are not an object or name a key the
	// function does not take.
	UnknownOption Class = "UnknownOption"
	// BadQueue: a queue name that breaks the queue naming rule.
	BadQueue Class = "BadQueue"
	// BadUniqueKey: a unique key over twice.MaxKeyBytes.
	BadUniqueKey Class = "BadUniqueKey"
	// BadMetadata: a metadata key over twice.MaxKeyBytes or a value that
	// is not a string.
	BadMetadata Class = "BadMetadata"
	// BadEnvelope: a message id or correlation id Go refuses (Go only:
	// the SQL function sets both to a new UUID).
	BadEnvelope Class = "BadEnvelope"
	// InvalidText: a NUL byte or bytes that are not UTF-8 in text;
	// PostgreSQL refuses the text parameter before the function runs.
	InvalidText Class = "InvalidText"
	// NULInJSON: a \u0000 escape in JSON; PostgreSQL's jsonb cannot hold
	// it and refuses the parameter before the function runs.
	NULInJSON Class = "NULInJSON"
)

// classes maps each class to its Go sentinel and SQLSTATE.
var classes = map[Class]struct {
	goErr    error
	sqlState string
}{
	InvalidKind:   {twice.ErrInvalidArgs, "TW001"},
	UnknownKind:   {twice.ErrUnknownKind, "TW002"},
	ArgsNotObject: {twice.ErrInvalidArgs, "TW003"},
	MalformedJSON: {twice.ErrInvalidArgs, "22P02"},
	UnknownField:  {twice.ErrInvalidArgs, "TW003"},
	WrongType:     {twice.ErrInvalidArgs, "TW003"},
	NestedObject:  {twice.ErrInvalidArgs, "TW003"},
	DuplicateKey:  {twice.ErrInvalidArgs, "TW003"},
	SecretField:   {twice.ErrInvalidArgs, "TW004"},
	TooLarge:      {twice.ErrInvalidArgs, "TW005"},
	BadOption:     {twice.ErrInvalidArgs, "TW006"},
	UnknownOption: {twice.ErrInvalidArgs, "TW006"},
	BadQueue:      {twice.ErrInvalidArgs, "TW007"},
	BadUniqueKey:  {twice.ErrInvalidArgs, "TW008"},
	BadMetadata:   {twice.ErrInvalidArgs, "TW008"},
	BadEnvelope:   {twice.ErrInvalidArgs, ""},
	InvalidText:   {twice.ErrInvalidArgs, "22021"},
	NULInJSON:     {twice.ErrInvalidArgs, "22P05"},
}

// GoErr is the sentinel error a Go refusal of the class wraps.
func (c Class) GoErr() error {
	if m, ok := classes[c]; ok {
		return m.goErr
	}
	return errors.New("unknown refusal class " + string(c))
}

// SQLState is the SQLSTATE a SQL refusal of the class carries: one of
// twicepg's SQLState constants (class TW), or PostgreSQL's own for input
// it refuses before twice_enqueue runs. It is "" for a Go-only class.
func (c Class) SQLState() string { return classes[c].sqlState }

// Classes lists every class, for the runners' checks of the mapping.
func Classes() []Class {
	out := make([]Class, 0, len(classes))
	for c := range classes {
		out = append(out, c)
	}
	return out
}
