package enqueuecases

import (
	"strings"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicetype"
)

// The kinds of the cases.
const (
	// Ping is catalogued with fields, its own queue and max attempts.
	Ping = "conf.ping.v1"
	// Shapeless is catalogued without fields (a type that encodes
	// itself), so its keys get the payload policy's name rule.
	Shapeless = "conf.shapeless.v1"
	// Unknown is in no catalog.
	Unknown = "conf.unknown.v1"
)

// PingFields are Ping's published fields.
var PingFields = []twicetype.ArgField{
	{Name: "user_id", Type: twicetype.ArgTypeInteger},
	{Name: "note", Type: twicetype.ArgTypeString},
	{Name: "tags", Type: twicetype.ArgTypeArray},
	{Name: "score", Type: twicetype.ArgTypeNumber},
	{Name: "extra", Type: twicetype.ArgTypeAny},
}

// Catalog is what both runners publish to the kind catalog (one
// CatalogPublish by node CatalogNode) before the cases run.
func Catalog() []twicetype.KindInfo {
	return []twicetype.KindInfo{
		{Kind: Ping, Queue: "pings", Strategy: "ClaimAfter", MaxAttempts: 7, Args: PingFields},
		// No max attempts: the default applies.
		{Kind: Shapeless, Queue: "shapes", Strategy: "ClaimAfter", Args: nil},
	}
}

// CatalogNode is the node that publishes Catalog.
const CatalogNode = "conformance"

// MaxAttemptsDefault is the max attempts of a kind whose catalog entry
// gives none: twice.MaxAttemptsDefault, which the SQL function hard-codes.
const MaxAttemptsDefault = twice.MaxAttemptsDefault

// pingFieldList is how a refusal lists Ping's fields.
const pingFieldList = "user_id, note, tags, score, extra"

// Cases returns the shared table. Values too large to write out are
// built here; each call returns a fresh table.
func Cases() []Case {
	blob := `{"blob": "` + strings.Repeat("x", twice.MaxArgsBytesDefault) + `"}`
	mib := `{"blob": "` + strings.Repeat("x", 1<<20) + `"}`
	longKind := "a." + strings.Repeat("b", twice.MaxKindBytes) + ".v1"
	pinged := Expect{Queue: "pings", MaxAttempts: 7}
	shaped := Expect{Queue: "shapes", MaxAttempts: MaxAttemptsDefault}
	with := func(e Expect, edit func(*Expect)) Expect { edit(&e); return e }
	refused := func(c Class, says string) Expect { return Expect{Refused: c, Says: says} }
	goZero := "Go's EnqueueOpts cannot express it: its zero value means the default"
	goTyped := "Go's EnqueueOpts is a typed struct: it cannot hold this JSON"

	return []Case{
		// Accepted: the stored job.
		{Name: "catalog defaults", Kind: Ping, Args: `{"user_id": 1, "tags": ["a, b: c", 2]}`, Want: pinged},
		{Name: "every option", Kind: Ping, Args: `{"user_id": 1}`,
			Opts: Options{Queue: "other", Priority: -2, MaxAttempts: 3, Delay: 3600, Metadata: map[string]string{"source": "psql"}},
			Want: Expect{Queue: "other", Priority: -2, MaxAttempts: 3, RunAfter: time.Hour, Metadata: map[string]string{"source": "psql"}}},
		{Name: "run_at", Kind: Ping, Args: `{}`, Opts: Options{RunAt: "2999-01-02T03:04:05Z"},
			Want: with(pinged, func(e *Expect) { e.RunAt = time.Date(2999, 1, 2, 3, 4, 5, 0, time.UTC) })},
		{Name: "null for a field", Kind: Ping, Args: `{"user_id": 1, "note": null}`, Want: pinged},
		{Name: "integer for a number field", Kind: Ping, Args: `{"score": 3}`, Want: pinged},
		{Name: "any primitive for an any field", Kind: Ping, Args: `{"extra": "a"}`, Want: pinged},
		{Name: "whitespace is compacted", Kind: Ping, Args: " { \"user_id\" : 3 ,\n \"note\": \"a : b\" } ", Want: pinged},
		{Name: "IDs of sensitive things without fields", Kind: Shapeless, Args: `{"email_id": 1, "cardId": 2, "token_count": 3}`, Want: shaped},
		{Name: "number with an exponent without fields", Kind: Shapeless, Args: `{"n": 1e3}`,
			Want: with(shaped, func(e *Expect) { e.StoredArgs = `{"n": 1000}` })},
		{Name: "forced unknown kind", Kind: Unknown, Args: `{"order_id": 9}`, Opts: Options{Force: true},
			Want: Expect{Queue: twice.QueueDefault, MaxAttempts: MaxAttemptsDefault}},
		{Name: "unique key held: the repeat is the first job", Kind: Ping, Args: `{"user_id": 1}`, Opts: Options{UniqueKey: "user-1"},
			Want: with(pinged, func(e *Expect) { e.UniqueKey = "user-1"; e.RepeatIsDuplicate = true })},
		{Name: "names and keys at their limits", Kind: Ping, Args: `{}`,
			Opts: Options{Queue: strings.Repeat("q", twice.MaxQueueBytes), UniqueKey: strings.Repeat("k", twice.MaxKeyBytes),
				Metadata: map[string]string{strings.Repeat("m", twice.MaxKeyBytes): strings.Repeat("v", 4096)}},
			Want: Expect{Queue: strings.Repeat("q", twice.MaxQueueBytes), MaxAttempts: 7, UniqueKey: strings.Repeat("k", twice.MaxKeyBytes),
				Metadata: map[string]string{strings.Repeat("m", twice.MaxKeyBytes): strings.Repeat("v", 4096)}}},

		// The kind.
		{Name: "empty kind", Kind: "", Args: `{}`, Want: refused(InvalidKind, `name it like "email.welcome.v1"`)},
		{Name: "unversioned kind", Kind: "conf.ping", Args: `{}`, Want: refused(InvalidKind, "end it with .v1")},
		{Name: "upper-case kind", Kind: "CONF.ping.v1", Args: `{}`, Want: refused(InvalidKind, `use "conf.ping.v1"`)},
		{Name: "version 0", Kind: "conf.ping.v0", Args: `{}`, Want: refused(InvalidKind, "versions start at .v1")},
		{Name: "empty segment", Kind: "conf..ping.v1", Args: `{}`, Want: refused(InvalidKind, "dot-separated lower-case segments")},
		{Name: "long kind", Kind: longKind, Args: `{}`, Want: refused(InvalidKind, "over the 255-byte limit")},
		{Name: "space in the kind", Kind: "conf ping.v1", Args: `{}`, Want: refused(InvalidKind, "dot-separated lower-case segments")},
		{Name: "segment starting with a digit", Kind: "conf.1ping.v1", Args: `{}`, Want: refused(InvalidKind, "dot-separated lower-case segments")},
		{Name: "kind at the limit", Kind: strings.Repeat("a", twice.MaxKindBytes-3) + ".v1", Args: `{}`, Opts: Options{Force: true},
			Want: Expect{Queue: twice.QueueDefault, MaxAttempts: MaxAttemptsDefault}},
		{Name: "NUL in the kind", Kind: "conf\x00.ping.v1", Args: `{}`, Opts: Options{Force: true},
			Want: refused(InvalidText, "contains a NUL byte"), SQLSays: "0x00"},
		{Name: "invalid UTF-8 in the kind", Kind: "conf\xff.ping.v1", Args: `{}`, Opts: Options{Force: true},
			Want: refused(InvalidText, "is not valid UTF-8"), SQLSays: "invalid byte sequence"},
		{Name: "unknown kind", Kind: "conf.pnig.v1", Args: `{}`, Want: refused(UnknownKind, "unknown job kind")},
		{Name: "NULL kind", NullKind: true, Args: `{}`, Want: refused(InvalidKind, "kind is NULL"),
			SQLOnly: "Go's kind is a string, never NULL; the empty kind is its case"},

		// The args as a whole.
		{Name: "no args", Kind: Ping, Args: "", Want: refused(ArgsNotObject, "not a JSON object"), SQLSays: "are NULL"},
		{Name: "args an array", Kind: Ping, Args: `[1]`, Want: refused(ArgsNotObject, "not a JSON object"), SQLSays: "not an object"},
		{Name: "args a string", Kind: Ping, Args: `"x"`, Want: refused(ArgsNotObject, "not a JSON object"), SQLSays: "not an object"},
		{Name: "malformed JSON", Kind: Ping, Args: `{"user_id":`, Want: refused(MalformedJSON, "not a JSON object"),
			SQLSays: "invalid input syntax for type json"},
		{Name: "over the size limit", Kind: Shapeless, Args: blob, Want: refused(TooLarge, "over the 2048-byte limit: pass IDs, not data")},
		{Name: "1 MiB", Kind: Shapeless, Args: mib, Want: refused(TooLarge, "over the 2048-byte limit")},
		{Name: "escapes over the size limit", Kind: Shapeless, Args: `{"blob": "` + strings.Repeat(`\u0041`, 400) + `"}`,
			Want:    refused(TooLarge, "over the 2048-byte limit"),
			SQLWant: &Expect{Queue: "shapes", MaxAttempts: MaxAttemptsDefault},
			KnownDifference: "Go measures the args as written (each \\u0041 six bytes, 2411 in all) and stores them so; jsonb has " +
				"decoded the escapes before twice_enqueue measures (411 bytes), so the size cap is not one rule on both paths"},
		{Name: "a key given twice", Kind: Shapeless, Args: `{"n": 1, "n": 2}`, Want: refused(DuplicateKey, `key "n" is given twice`),
			SQLWant:         &Expect{Queue: "shapes", MaxAttempts: MaxAttemptsDefault, StoredArgs: `{"n": 2}`},
			KnownDifference: "jsonb keeps the last of a key given twice before twice_enqueue sees the args, so it cannot refuse it (migration 019's header)"},
		{Name: "NUL escape in the args", Kind: Shapeless, Args: `{"note": "a\u0000b"}`, Want: shaped,
			SQLWant: &Expect{Refused: NULInJSON, Says: "unsupported Unicode escape sequence"},
			KnownDifference: "PostgreSQL's jsonb cannot hold \\u0000, so the SQL path refuses args Go stores " +
				"(Go's payload policy has no rule on NUL in args values)"},

		// The args against the kind's published fields.
		{Name: "wrong field type", Kind: Ping, Args: `{"user_id": "1"}`, Want: refused(WrongType, `field "user_id" is string, want integer`)},
		{Name: "fraction for an integer", Kind: Ping, Args: `{"user_id": 1.5}`, Want: refused(WrongType, `field "user_id" is number, want integer`)},
		{Name: "an object in an array field", Kind: Ping, Args: `{"tags": [{"id": 1}]}`,
			Want: refused(WrongType, `field "tags" is an array holding an object, want array`)},
		{Name: "an object for an any field", Kind: Ping, Args: `{"extra": {}}`, Want: refused(WrongType, `field "extra" is object, want any`)},
		{Name: "unknown field", Kind: Ping, Args: `{"user_id": 1, "password": "x"}`,
			Want: refused(UnknownField, `unknown field "password": the kind's fields are `+pingFieldList)},
		{Name: "field in another case", Kind: Ping, Args: `{"User_ID": 1}`, Want: refused(UnknownField, `unknown field "User_ID": did you mean "user_id"?`)},
		{Name: "exponent for an integer field", Kind: Ping, Args: `{"user_id": 1e3}`,
			Want:    refused(WrongType, `field "user_id" is number, want integer`),
			SQLWant: &Expect{Queue: "pings", MaxAttempts: 7, StoredArgs: `{"user_id": 1000}`},
			KnownDifference: "jsonb rewrites 1e3 as the integer 1000 before twice_enqueue sees the args (migration 019's header), " +
				"so the SQL path takes for an integer field what Go refuses as a number"},

		// The args without published fields: the payload policy.
		{Name: "personal data key", Kind: Shapeless, Args: `{"user_id": 1, "email": "a@example.com"}`,
			Want: refused(SecretField, `key "email" looks like personal data`)},
		{Name: "secret key", Kind: Shapeless, Args: `{"cv_id": 3, "password": "hunter2"}`, Want: refused(SecretField, `key "password" looks like a secret`)},
		{Name: "capitalised personal data key", Kind: Shapeless, Args: `{"cv_id": 3, "Email": "a@example.com"}`,
			Want: refused(SecretField, `key "Email" looks like personal data`)},
		{Name: "secret key of a forced kind", Kind: Unknown, Args: `{"apiToken": "x"}`, Opts: Options{Force: true},
			Want: refused(SecretField, `key "apiToken" looks like a secret ("token")`)},
		{Name: "array holding an object", Kind: Shapeless, Args: `{"users": [{"id": 1}]}`, Want: refused(NestedObject, `key "users" has an object`)},
		{Name: "escaped secret key", Kind: Shapeless, Args: `{"p\u0061ssword": "x"}`, Want: refused(SecretField, `key "password" looks like a secret`)},
		{Name: "two sensitive keys", Kind: Shapeless, Args: `{"password": "x", "email": "y"}`,
			Want:    refused(SecretField, `key "password" looks like a secret`),
			SQLWant: &Expect{Refused: SecretField, Says: `key "email" looks like personal data`},
			Why: "both refuse and name the first bad key they meet: Go meets the keys in the order given, " +
				"twice_enqueue in jsonb's order (shorter keys first)"},
		{Name: "nested object", Kind: Shapeless, Args: `{"user": {"id": 1}}`, Want: refused(NestedObject, `key "user" has an object`)},
		{Name: "array of objects", Kind: Shapeless, Args: `{"users": [[{"id": 1}]]}`, Want: refused(NestedObject, `key "users" has an object`)},

		// The options.
		{Name: "negative delay", Kind: Ping, Args: `{}`, Opts: Options{Delay: -1}, Want: refused(BadOption, "negative Delay"), SQLSays: "out of range"},
		{Name: "negative max attempts", Kind: Ping, Args: `{}`, Opts: Options{MaxAttempts: -1}, Want: refused(BadOption, "use at least 1")},
		{Name: "priority beyond 32 bits", Kind: Ping, Args: `{}`, Opts: Options{Priority: 99999999999},
			Want: refused(BadOption, "not a 32-bit integer")},
		{Name: "max attempts beyond 32 bits", Kind: Ping, Args: `{}`, Opts: Options{MaxAttempts: 99999999999},
			Want: refused(BadOption, "is not a 32-bit integer"), SQLSays: "is not a positive integer"},
		{Name: "delay of 200 years", Kind: Ping, Args: `{}`, Opts: Options{Delay: 200 * 365.25 * 24 * 3600},
			Want: refused(BadOption, "out of range")},
		{Name: "delay of 100 years", Kind: Ping, Args: `{}`, Opts: Options{Delay: 100 * 365.25 * 24 * 3600},
			Want: with(pinged, func(e *Expect) { e.RunAfter = time.Duration(100 * 365.25 * 24 * float64(time.Hour)) })},
		{Name: "run_at and delay", Kind: Ping, Args: `{}`, Opts: Options{RunAt: "2999-01-02T03:04:05Z", Delay: 1},
			Want:    with(pinged, func(e *Expect) { e.RunAt = time.Date(2999, 1, 2, 3, 4, 5, 0, time.UTC) }),
			SQLWant: &Expect{Refused: BadOption, Says: "give one"},
			Why: "Go's EnqueueOpts documents Delay as ignored when RunAt is set; the SQL opts are written by hand, " +
				"so twice_enqueue refuses both rather than guess which the caller meant"},
		{Name: "zero max_attempts", Kind: Ping, Args: `{}`, RawSQLOpts: `{"max_attempts": 0}`, Want: refused(BadOption, "use at least 1"), SQLOnly: goZero},
		{Name: "unknown option", Kind: Ping, Args: `{}`, RawSQLOpts: `{"queue": "default", "retries": 3}`,
			Want: refused(UnknownOption, `unknown option "retries"`), SQLOnly: goTyped},
		{Name: "opts an array", Kind: Ping, Args: `{}`, RawSQLOpts: `[]`, Want: refused(UnknownOption, "not an object"), SQLOnly: goTyped},
		{Name: "run_at not a time", Kind: Ping, Args: `{}`, RawSQLOpts: `{"run_at": "tomorrow-ish"}`,
			Want: refused(BadOption, `run_at tomorrow-ish of kind "conf.ping.v1" is not a time`), SQLOnly: "Go's RunAt is a time.Time"},
		{Name: "infinite run_at", Kind: Ping, Args: `{}`, RawSQLOpts: `{"run_at": "infinity"}`, Want: refused(BadOption, "is not a time"),
			SQLOnly: "Go's RunAt is a time.Time"},
		{Name: "run_at a number", Kind: Ping, Args: `{}`, RawSQLOpts: `{"run_at": 5}`, Want: refused(BadOption, "pass a timestamp text"), SQLOnly: goTyped},
		{Name: "delay as interval text", Kind: Ping, Args: `{}`, RawSQLOpts: `{"delay": "5 minutes"}`,
			Want: refused(BadOption, "pass a number of seconds"), SQLOnly: "Go's Delay is a time.Duration"},
		{Name: "fractional priority", Kind: Ping, Args: `{}`, RawSQLOpts: `{"priority": 1.5}`, Want: refused(BadOption, "not a 32-bit integer"),
			SQLOnly: "Go's Priority is an int"},
		{Name: "force a string", Kind: Ping, Args: `{}`, RawSQLOpts: `{"force": "yes"}`, Want: refused(BadOption, "pass true or false"), SQLOnly: goTyped},
		{Name: "null options are defaults", Kind: Ping, Args: `{}`, RawSQLOpts: `{"queue": null, "run_at": null, "unique_key": null}`,
			Want: pinged, SQLOnly: "Go has no null option: its zero values are the defaults"},

		// The queue.
		{Name: "markup in the queue", Kind: Ping, Args: `{}`, Opts: Options{Queue: "<script>alert(1)</script>"},
			Want: refused(BadQueue, `queue name "<script>alert(1)</script>" is malformed`)},
		{Name: "upper-case queue", Kind: Ping, Args: `{}`, Opts: Options{Queue: "Emails"}, Want: refused(BadQueue, `use "emails"`)},
		{Name: "long queue", Kind: Ping, Args: `{}`, Opts: Options{Queue: strings.Repeat("q", twice.MaxQueueBytes+1)},
			Want: refused(BadQueue, "over the 128-byte limit")},
		{Name: "10,000-character queue", Kind: Ping, Args: `{}`, Opts: Options{Queue: strings.Repeat("q", 10000)},
			Want: refused(BadQueue, "over the 128-byte limit")},
		{Name: "NUL in the queue", Kind: Ping, Args: `{}`, Opts: Options{Queue: "a\x00b"},
			Want: refused(NULInJSON, "contains a NUL byte"), SQLSays: "unsupported Unicode escape sequence"},
		{Name: "empty queue", Kind: Ping, Args: `{}`, RawSQLOpts: `{"queue": ""}`, Want: refused(BadQueue, `name it like "default"`), SQLOnly: goZero},

		// The unique key and metadata.
		{Name: "long unique key", Kind: Ping, Args: `{}`, Opts: Options{UniqueKey: strings.Repeat("k", twice.MaxKeyBytes+1)},
			Want: refused(BadUniqueKey, "over the 512-byte limit")},
		{Name: "100 KB unique key", Kind: Ping, Args: `{}`, Opts: Options{UniqueKey: strings.Repeat("k", 100<<10)},
			Want: refused(BadUniqueKey, "over the 512-byte limit")},
		{Name: "invalid UTF-8 in the unique key", Kind: Ping, Args: `{}`, Opts: Options{UniqueKey: "a\xffb"},
			Want: refused(InvalidText, `unique key "a\xffb" is not valid UTF-8`), SQLSays: "invalid byte sequence"},
		{Name: "NUL in the unique key", Kind: Ping, Args: `{}`, Opts: Options{UniqueKey: "a\x00b"},
			Want: refused(NULInJSON, "contains a NUL byte"), SQLSays: "unsupported Unicode escape sequence"},
		{Name: "long metadata key", Kind: Ping, Args: `{}`, Opts: Options{Metadata: map[string]string{strings.Repeat("m", twice.MaxKeyBytes+1): "v"}},
			Want: refused(BadMetadata, "over the 512-byte limit")},
		{Name: "NUL in a metadata value", Kind: Ping, Args: `{}`, Opts: Options{Metadata: map[string]string{"source": "a\x00b"}},
			Want: refused(NULInJSON, "contains a NUL byte"), SQLSays: "unsupported Unicode escape sequence"},
		{Name: "metadata not strings", Kind: Ping, Args: `{}`, RawSQLOpts: `{"metadata": {"n": 1}}`,
			Want: refused(BadMetadata, `metadata key "n"`), SQLOnly: "Go's Metadata is a map[string]string"},

		// Go's envelope options.
		{Name: "NUL in the message id", Kind: Ping, Args: `{}`, Opts: Options{MessageID: "m\x00"}, Want: refused(BadEnvelope, "message id"),
			GoOnly: "twice_enqueue takes no message id: it sets a new UUID"},
		{Name: "long correlation id", Kind: Ping, Args: `{}`, Opts: Options{CorrelationID: strings.Repeat("c", twice.MaxKeyBytes+1)},
			Want: refused(BadEnvelope, "correlation id"), GoOnly: "twice_enqueue takes no correlation id: it sets a new UUID"},
	}
}
