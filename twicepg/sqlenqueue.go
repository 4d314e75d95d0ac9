package twicepg

// The SQL enqueue function: migration 019 ships twice_enqueue(kind, args,
// opts), which enqueues a job from SQL in the caller's transaction under
// the rules of the root package's EnqueueJSON. Its refusals carry the
// SQLSTATEs below (class TW), so a caller in any language can tell them
// apart without reading the message; the migration's header documents the
// options and the savepoint a caller needs to go on after a refusal.

// SQLSTATEs twice_enqueue raises. A pgx caller reads them from
// (*pgconn.PgError).Code.
const (
	// SQLStateInvalidKind: the kind is NULL, malformed or over 255 bytes.
	SQLStateInvalidKind = "TW001"
	// SQLStateUnknownKind: the kind catalog does not hold the kind and
	// opts do not say "force": true.
	SQLStateUnknownKind = "TW002"
	// SQLStateInvalidArgs: args are NULL, not a JSON object, hold an
	// object, or do not fit the kind's published fields.
	SQLStateInvalidArgs = "TW003"
	// SQLStateSensitiveArgs: an args key looks like a secret or personal
	// data (the payload policy's name rule) for a kind without published
	// fields.
	SQLStateSensitiveArgs = "TW004"
	// SQLStateArgsTooLarge: the compacted args are over
	// twice.MaxArgsBytesDefault bytes.
	SQLStateArgsTooLarge = "TW005"
	// SQLStateInvalidOpts: opts are not an object, have an unknown key or
	// a value of the wrong type or range (run_at not a time, a negative
	// delay, max_attempts below 1), or give both run_at and delay.
	SQLStateInvalidOpts = "TW006"
	// SQLStateInvalidQueue: the queue name breaks the queue naming rule.
	SQLStateInvalidQueue = "TW007"
	// SQLStateInvalidKey: the unique key or a metadata key is over
	// twice.MaxKeyBytes, a metadata value is not a string, or the unique
	// key's holder kept changing.
	SQLStateInvalidKey = "TW008"
)
