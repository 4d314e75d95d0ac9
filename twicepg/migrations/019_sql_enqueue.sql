-- 019: twice_enqueue, the SQL enqueue function.
--
--   SELECT twice_enqueue(kind text, args jsonb, opts jsonb DEFAULT '{}') -> bigint
--
-- Enqueues one job from SQL (psql, a trigger, a client in any language) in
-- the caller's transaction: the job commits with the caller's writes or not
-- at all, and the workers are woken on commit by a pg_notify on the schema's
-- insert channel, the one a Go EnqueueTx uses. It returns the new job's id,
-- or for a unique_key a job of the kind already holds, that job's id (no
-- second job is stored, as Go's Enqueue reports a duplicate).
--
-- It applies the rules of Go's EnqueueJSON: the kind's name rule; a kind
-- the catalog (twice_kinds) does not hold is refused unless opts say
-- "force": true; args must be a JSON object of at most 2048 bytes once
-- compacted (twice.MaxArgsBytesDefault; opts cannot raise it) whose values
-- are primitives or arrays of them; a kind whose catalog row lists fields
-- takes only those keys, each with a value of its JSON type or null; with
-- no fields listed (or a forced kind) every key must pass the payload
-- policy's name rule (twice_sensitive_name, the word table of the root
-- package's argsnames.go, ported word for word); the queue name rule; keys
-- of at most 512 bytes (twice.MaxKeyBytes).
--
-- opts keys (any other key is refused, naming it):
--   queue         text    defaults to the catalog's queue of the kind, else 'default'
--   run_at        text    a timestamptz literal ('2026-01-02T03:04:05Z'); defaults to now
--   delay         number  seconds from now (not an interval text); not with run_at
--   priority      integer lower runs first; defaults to 0
--   max_attempts  integer at least 1; defaults to the catalog's, else 20
--   unique_key    text    one job of the kind holds it while available or running
--   metadata      object  of string values, carried to the handler
--   force         boolean store a kind the catalog does not know
-- The message id, idempotency key and correlation id are a new UUID.
--
-- Errors are RAISEd with SQLSTATEs of class TW, which the Go constants
-- twicepg.SQLState… name too, and a message that says what to do:
--   TW001 kind is NULL or malformed        TW005 args over the size limit
--   TW002 kind unknown to the catalog      TW006 opts malformed or unknown key
--   TW003 args NULL, not an object, or     TW007 queue name malformed
--         against the kind's fields        TW008 unique key or metadata malformed
--   TW004 args key looks like a secret or personal data
-- A refused call stores nothing. Like any error it aborts the caller's
-- transaction; a caller that wants to go on catches it in a savepoint
-- (SAVEPOINT s; SELECT twice_enqueue(...); on error ROLLBACK TO SAVEPOINT s;
-- a PL/pgSQL caller uses BEGIN ... EXCEPTION, which is one).
--
-- Known differences from Go: jsonb keeps the last of a key given twice
-- (Go refuses it) and rewrites numbers (1e3 is stored as 1000, an integer);
-- the idempotency key is the message id (a Go args type can name its own);
-- a kind's concurrency key and unique options come from its Go
-- registration, which SQL does not see, so they do not apply.
--
-- The functions run with the search_path pinned to the schema they were
-- created in (set at the end of this file), so a caller whose search_path
-- differs (SELECT myschema.twice_enqueue(...)) still writes that schema's
-- tables and notifies its channel. Renaming the schema needs a new pin.

-- twice_channel is base in the public schema and base.schema elsewhere,
-- a schema name that makes it longer than 63 bytes replaced by its 64-bit
-- FNV-1a hash in 16 hex digits: the driver's schemaChannel, so the wake-up
-- reaches the listeners a Go client starts.
CREATE FUNCTION twice_channel(base text) RETURNS text LANGUAGE plpgsql STABLE AS $$
DECLARE
    s text := current_schema();
    ch text := base || '.' || s;
    b bytea;
    h numeric := 14695981039346656037;
    lo integer;
BEGIN
    IF s = 'public' THEN
        RETURN base;
    END IF;
    IF octet_length(ch) <= 63 THEN
        RETURN ch;
    END IF;
    b := convert_to(s, 'UTF8');
    FOR i IN 0 .. length(b) - 1 LOOP
        lo := (h % 256)::integer;
        h := h - lo + (lo # get_byte(b, i));
        h := (h * 1099511628211) % 18446744073709551616;
    END LOOP;
    IF h >= 9223372036854775808 THEN
        h := h - 18446744073709551616;
    END IF;
    RETURN base || '.' || lpad(to_hex(h::bigint), 16, '0');
END
$$;

-- The triggers of 012 notify through twice_insert_channel: with the hash,
-- long schema names get their wake-ups too.
CREATE OR REPLACE FUNCTION twice_insert_channel() RETURNS text LANGUAGE sql STABLE AS $$
    SELECT twice_channel('twice_insert')
$$;

-- twice_digit_pattern matches one decimal digit as Go's unicode.IsDigit
-- does (Unicode category Nd, which the root package's nameWords splits
-- at): the regular expression classes follow the C library, which counts
-- only 0-9 as digits and the other scripts' digits as letters. The ranges
-- are Go's unicode.Nd beyond ASCII; a database not in UTF8 has no such
-- characters. IMMUTABLE, so a caller's plan folds it to a constant.
CREATE FUNCTION twice_digit_pattern() RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT '^[0-9' || CASE WHEN getdatabaseencoding() = 'UTF8' THEN
        (SELECT string_agg(chr(r[i]) || '-' || chr(r[i + 1]), '' ORDER BY i)
         FROM (SELECT ARRAY[
        1632, 1641, 1776, 1785, 1984, 1993, 2406, 2415, 2534, 2543, 2662, 2671, 2790, 2799, 2918, 2927,
        3046, 3055, 3174, 3183, 3302, 3311, 3430, 3439, 3558, 3567, 3664, 3673, 3792, 3801, 3872, 3881,
        4160, 4169, 4240, 4249, 6112, 6121, 6160, 6169, 6470, 6479, 6608, 6617, 6784, 6793, 6800, 6809,
        6992, 7001, 7088, 7097, 7232, 7241, 7248, 7257, 42528, 42537, 43216, 43225, 43264, 43273, 43472, 43481,
        43504, 43513, 43600, 43609, 44016, 44025, 65296, 65305, 66720, 66729, 68912, 68921, 69734, 69743, 69872, 69881,
        69942, 69951, 70096, 70105, 70384, 70393, 70736, 70745, 70864, 70873, 71248, 71257, 71360, 71369, 71472, 71481,
        71904, 71913, 72016, 72025, 72784, 72793, 73040, 73049, 73120, 73129, 73552, 73561, 92768, 92777, 92864, 92873,
        93008, 93017, 120782, 120831, 123200, 123209, 123632, 123641, 124144, 124153, 125264, 125273, 130032, 130041
         ]) AS a(r), generate_series(1, array_length(r, 1), 2) AS i)
        ELSE '' END || ']$'
$$;

-- twice_name_words splits a field name into lower-case words as the root
-- package's nameWords does: at non-alphanumerics, between a lower-case and
-- an upper-case letter, before the last capital of an acronym followed by
-- a lower-case letter unless that is a plural's s, between letters and
-- digits. Letters and their case are the server's: under a UTF-8 ctype
-- (C.UTF-8, en_US.UTF-8) they are Unicode's, as in Go; under ctype C only
-- ASCII letters are letters, so a non-ASCII letter splits words there.
CREATE FUNCTION twice_name_words(name text) RETURNS text[] LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    r text[] := regexp_split_to_array(name, '');
    n integer := coalesce(array_length(r, 1), 0);
    words text[] := '{}';
    start integer := 0; -- 0: no word open
    c text;
    p text;
    boundary boolean;
    digit CONSTANT text := twice_digit_pattern();
BEGIN
    FOR i IN 1 .. n LOOP
        c := r[i];
        IF c !~ '^[[:alpha:]]$' AND c !~ digit THEN
            IF start > 0 THEN
                words := words || lower(array_to_string(r[start:i - 1], ''));
            END IF;
            start := 0;
            CONTINUE;
        END IF;
        IF start = 0 THEN
            start := i;
            CONTINUE;
        END IF;
        p := r[i - 1];
        boundary := false;
        IF (c ~ digit) <> (p ~ digit) THEN
            boundary := true;
        ELSIF c ~ '^[[:upper:]]$' AND p ~ '^[[:lower:]]$' THEN
            boundary := true;
        ELSIF c ~ '^[[:upper:]]$' AND p ~ '^[[:upper:]]$' AND i < n AND r[i + 1] ~ '^[[:lower:]]$' THEN
            boundary := NOT (r[i + 1] = 's' AND (i + 2 > n OR r[i + 2] !~ '^[[:lower:]]$'));
        END IF;
        IF boundary THEN
            words := words || lower(array_to_string(r[start:i - 1], ''));
            start := i;
        END IF;
    END LOOP;
    IF start > 0 THEN
        words := words || lower(array_to_string(r[start:n], ''));
    END IF;
    RETURN words;
END
$$;

-- twice_sensitive_name is the payload policy's name rule (the root
-- package's sensitiveNames and matchSensitive): the entry a field name
-- matches and what it means ('a secret', 'personal data'), or NULLs. The
-- table is the Go one, in its order; TestSQLEnqueueNameRuleParity reads
-- argsnames.go and proves each entry gets the same verdict here.
CREATE FUNCTION twice_sensitive_name(name text, OUT phrase text, OUT what text)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    -- phrase, 's' for a secret or 'p' for personal data, and 't' when the
    -- entry also matches at the end of one longer word.
    entries CONSTANT text[] := ARRAY[
        'password|s|t', 'passwd|s|t', 'pwd|s|f', 'passphrase|s|t', 'secret|s|t', 'token|s|t',
        'credential|s|t', 'api key|s|f', 'access key|s|f', 'private key|s|f', 'signing key|s|f',
        'encryption key|s|f', 'session key|s|f', 'jwt|s|f', 'otp|s|f', 'totp|s|f', 'pin|s|f',
        'cvv|s|f', 'cvc|s|f', 'bearer|s|f', 'cookie|s|f', 'authorization|s|f', 'auth header|s|f',
        'email|p|f', 'e mail|p|f', 'mail address|p|f', 'phone|p|f', 'mobile number|p|f',
        'msisdn|p|f', 'ssn|p|f', 'social security|p|f', 'national id|p|f', 'tax id|p|f',
        'iban|p|f', 'card|p|f', 'passport|p|f', 'dob|p|f', 'birthdate|p|f', 'birth date|p|f',
        'date of birth|p|f', 'birthday|p|f', 'full name|p|f', 'user name|p|f', 'first name|p|f',
        'last name|p|f', 'given name|p|f', 'family name|p|f', 'middle name|p|f',
        'maiden name|p|f', 'surname|p|f', 'home address|p|f', 'street address|p|f',
        'postal address|p|f', 'mailing address|p|f', 'billing address|p|f',
        'shipping address|p|f', 'ip|p|f', 'ip address|p|f', 'ip addr|p|f', 'mac address|p|f'];
    -- A name can match an entry only where one of its words is an entry
    -- run together (or its plural, or, for a suffix entry, ends in one),
    -- or two words in a row are the last two of an entry (or plurals):
    -- a name with neither, which is most names, skips the loop below.
    -- TestSQLEnqueueNameRuleParity fails on an entry left out here.
    entry_joined CONSTANT text[] := ARRAY[
        'accesskey', 'apikey', 'authheader', 'authorization', 'bearer', 'billingaddress', 'birthdate',
        'birthday', 'card', 'cookie', 'credential', 'cvc', 'cvv', 'dateofbirth', 'dob', 'email',
        'encryptionkey', 'familyname', 'firstname', 'fullname', 'givenname', 'homeaddress', 'iban', 'ip',
        'ipaddr', 'ipaddress', 'jwt', 'lastname', 'macaddress', 'maidenname', 'mailaddress',
        'mailingaddress', 'middlename', 'mobilenumber', 'msisdn', 'nationalid', 'otp', 'passphrase',
        'passport', 'passwd', 'password', 'phone', 'pin', 'postaladdress', 'privatekey', 'pwd', 'secret',
        'sessionkey', 'shippingaddress', 'signingkey', 'socialsecurity', 'ssn', 'streetaddress', 'surname',
        'taxid', 'token', 'totp', 'username'];
    entry_pairs CONSTANT text[] := ARRAY[
        'access key', 'api key', 'auth header', 'billing address', 'birth date', 'e mail', 'encryption key',
        'family name', 'first name', 'full name', 'given name', 'home address', 'ip addr', 'ip address',
        'last name', 'mac address', 'maiden name', 'mail address', 'mailing address', 'middle name',
        'mobile number', 'national id', 'of birth', 'postal address', 'private key', 'session key',
        'shipping address', 'signing key', 'social security', 'street address', 'tax id', 'user name'];
    qualifiers CONSTANT text[] := ARRAY['id', 'ids', 'uuid', 'guid', 'count', 'len', 'length', 'size',
        'type', 'kind', 'version'];
    words text[] := twice_name_words(name);
    n integer := coalesce(array_length(words, 1), 0);
    qualified boolean;
    entry text;
    e text[];
    p text[];
    joined text;
    w text;
    start integer;
    hit boolean;
BEGIN
    IF n = 0 OR NOT EXISTS (SELECT 1 FROM generate_subscripts(words, 1) AS i
        WHERE words[i] = ANY (entry_joined) OR left(words[i], -1) = ANY (entry_joined)
            OR words[i] ~ '(password|passwd|passphrase|secret|token|credential)s?$'
            OR (i > 1 AND (words[i - 1] || ' ' || words[i] = ANY (entry_pairs)
                OR left(words[i - 1], -1) || ' ' || words[i] = ANY (entry_pairs)
                OR words[i - 1] || ' ' || left(words[i], -1) = ANY (entry_pairs)
                OR left(words[i - 1], -1) || ' ' || left(words[i], -1) = ANY (entry_pairs)))) THEN
        RETURN;
    END IF;
    qualified := n > 1 AND (words[n] = ANY (qualifiers)
        OR (CASE WHEN right(words[n], 1) = 's' THEN left(words[n], -1) ELSE words[n] END) = ANY (qualifiers));
    FOR fin IN 1 .. n LOOP
        IF qualified AND fin <> n THEN
            CONTINUE; -- the name is about the thing: only an entry ending in the qualifier counts
        END IF;
        w := words[fin];
        FOREACH entry IN ARRAY entries LOOP
            e := string_to_array(entry, '|');
            joined := replace(e[1], ' ', '');
            hit := w = joined OR w = joined || 's'
                OR (e[3] = 't' AND length(w) > length(joined)
                    AND (right(w, length(joined)) = joined OR right(w, length(joined) + 1) = joined || 's'));
            IF NOT hit AND fin > 1 AND strpos(e[1], ' ') > 0 THEN
                p := string_to_array(e[1], ' ');
                start := fin - array_length(p, 1) + 1;
                IF start >= 1 THEN
                    hit := true;
                    FOR j IN 1 .. array_length(p, 1) LOOP
                        IF words[start + j - 1] <> p[j] AND words[start + j - 1] <> p[j] || 's' THEN
                            hit := false;
                            EXIT;
                        END IF;
                    END LOOP;
                END IF;
            END IF;
            IF hit THEN
                phrase := e[1];
                what := CASE e[2] WHEN 's' THEN 'a secret' ELSE 'personal data' END;
                RETURN;
            END IF;
        END LOOP;
    END LOOP;
END
$$;

-- twice_args_problem says what is wrong with one key and value of args,
-- or NULL: against the kind's fields (a JSON array of {name, type}), or,
-- when fields is NULL, the payload policy (primitive values, the name
-- rule). It returns the SQLSTATE and the message, as CheckArgsJSON's
-- checkMember words them.
CREATE FUNCTION twice_args_problem(key text, value jsonb, fields jsonb, OUT code text, OUT message text)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    got text := jsonb_typeof(value);
    holds_object boolean := jsonb_path_exists(value, 'strict $.** ? (@.type() == "object")');
    typ text;
    near text;
    names text;
    m record;
BEGIN
    IF got = 'number' AND value::text !~ '[.eE]' THEN
        got := 'integer';
    END IF;
    IF fields IS NULL THEN
        IF holds_object THEN
            code := 'TW003';
            message := format('key %s has an object: args carry IDs and other primitive values; pass the ID of the entity instead',
                to_jsonb(key)::text);
            RETURN;
        END IF;
        m := twice_sensitive_name(key);
        IF m.phrase IS NOT NULL THEN
            code := 'TW004';
            message := format('key %s looks like %s (%s): args are stored and shown as plaintext, '
                'so pass an ID and let the handler load or regenerate the value', to_jsonb(key)::text, m.what,
                to_jsonb(m.phrase)::text);
        END IF;
        RETURN;
    END IF;
    SELECT f->>'type' INTO typ FROM jsonb_array_elements(fields) AS f WHERE f->>'name' = key LIMIT 1;
    IF NOT FOUND THEN
        SELECT f->>'name' INTO near FROM jsonb_array_elements(fields) AS f
        WHERE lower(f->>'name') = lower(key) LIMIT 1;
        code := 'TW003';
        IF near IS NOT NULL THEN
            message := format('unknown field %s: did you mean %s?', to_jsonb(key)::text, to_jsonb(near)::text);
            RETURN;
        END IF;
        SELECT string_agg(f->>'name', ', ' ORDER BY o) INTO names FROM jsonb_array_elements(fields) WITH ORDINALITY AS x(f, o);
        IF names IS NULL THEN
            message := format('unknown field %s: the kind has no fields; pass {}', to_jsonb(key)::text);
        ELSE
            message := format('unknown field %s: the kind''s fields are %s', to_jsonb(key)::text, names);
        END IF;
        RETURN;
    END IF;
    typ := coalesce(nullif(typ, ''), 'any');
    IF got = 'null' OR (typ = 'number' AND got = 'integer') THEN
        RETURN;
    END IF;
    IF typ = 'any' THEN
        IF holds_object THEN
            code := 'TW003';
            message := format('field %s is %s, want any', to_jsonb(key)::text, got);
        END IF;
        RETURN;
    END IF;
    IF got <> typ THEN
        code := 'TW003';
        message := format('field %s is %s, want %s', to_jsonb(key)::text, got, typ);
    ELSIF typ = 'array' AND holds_object THEN
        code := 'TW003';
        message := format('field %s is an array holding an object, want array', to_jsonb(key)::text);
    END IF;
END
$$;

CREATE FUNCTION twice_enqueue(kind text, args jsonb, opts jsonb DEFAULT '{}'::jsonb) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    max_args_bytes CONSTANT integer := 2048; -- twice.MaxArgsBytesDefault
    max_key_bytes CONSTANT integer := 512;   -- twice.MaxKeyBytes
    known_opts CONSTANT text[] := ARRAY['queue', 'run_at', 'delay', 'priority', 'max_attempts', 'unique_key',
        'metadata', 'force'];
    v_kind text := kind;
    v_opts jsonb := coalesce(opts, '{}'::jsonb);
    v_queue text;
    v_priority integer := 0;
    v_max_attempts integer;
    v_run_at timestamptz;
    v_now timestamptz := clock_timestamp();
    v_unique_key text := '';
    v_metadata jsonb := '{}';
    v_force boolean := false;
    v_compact text;
    v_id bigint;
    v_msg_id text;
    v_cat record;
    v_fields jsonb;
    v_key text;
    v_value jsonb;
    v_problem record;
BEGIN
    -- The kind.
    IF v_kind IS NULL THEN
        RAISE EXCEPTION 'twice_enqueue: kind is NULL: pass a kind like ''email.welcome.v1'''
            USING ERRCODE = 'TW001';
    END IF;
    IF octet_length(v_kind) > 255 THEN
        RAISE EXCEPTION 'twice_enqueue: job kind % is % bytes, over the 255-byte limit: use a shorter one',
            to_jsonb(left(v_kind, 32) || '...')::text, octet_length(v_kind) USING ERRCODE = 'TW001';
    END IF;
    IF v_kind !~ '^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*\.v[1-9][0-9]*$' THEN
        RAISE EXCEPTION 'twice_enqueue: job kind % is malformed: %', to_jsonb(v_kind)::text,
            CASE
                WHEN v_kind = '' THEN 'name it like "email.welcome.v1"'
                WHEN lower(v_kind) <> v_kind THEN format('use %s', to_jsonb(lower(v_kind))::text)
                WHEN v_kind !~ '\.v[0-9]+$' THEN 'it is not versioned: end it with .v1'
                WHEN v_kind ~ '\.v0$' THEN 'it has version 0: versions start at .v1'
                ELSE 'use dot-separated lower-case segments (letters, digits, ''-'', ''_'', each starting with a letter) '
                    'ending in a version, like "email.welcome.v1"'
            END
            USING ERRCODE = 'TW001';
    END IF;

    -- The options.
    IF jsonb_typeof(v_opts) <> 'object' THEN
        RAISE EXCEPTION 'twice_enqueue: opts of kind % are a JSON %, not an object: pass one like ''{"queue": "default"}''',
            to_jsonb(v_kind)::text, jsonb_typeof(v_opts) USING ERRCODE = 'TW006';
    END IF;
    SELECT k INTO v_key FROM jsonb_object_keys(v_opts) AS k WHERE k <> ALL (known_opts) ORDER BY k LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'twice_enqueue: unknown option % for kind %: use %', to_jsonb(v_key)::text,
            to_jsonb(v_kind)::text, array_to_string(known_opts, ', ') USING ERRCODE = 'TW006';
    END IF;
    -- Options of the wrong JSON type; JSON null is the default.
    SELECT o.key INTO v_key FROM jsonb_each(v_opts) AS o
    WHERE jsonb_typeof(o.value) <> 'null' AND jsonb_typeof(o.value) <> CASE o.key
        WHEN 'queue' THEN 'string' WHEN 'run_at' THEN 'string' WHEN 'unique_key' THEN 'string'
        WHEN 'delay' THEN 'number' WHEN 'priority' THEN 'number' WHEN 'max_attempts' THEN 'number'
        WHEN 'metadata' THEN 'object' WHEN 'force' THEN 'boolean' END
    ORDER BY o.key LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'twice_enqueue: option % of kind % is a JSON %: %', to_jsonb(v_key)::text, to_jsonb(v_kind)::text,
            jsonb_typeof(v_opts->v_key), CASE v_key
                WHEN 'queue' THEN 'pass a queue name, like "default"'
                WHEN 'run_at' THEN 'pass a timestamp text, like "2026-01-02T03:04:05Z"'
                WHEN 'unique_key' THEN 'pass a text key'
                WHEN 'delay' THEN 'pass a number of seconds, like 30'
                WHEN 'priority' THEN 'pass an integer, lower runs first'
                WHEN 'max_attempts' THEN 'pass an integer of at least 1'
                WHEN 'metadata' THEN 'pass an object of strings, like {"source": "billing"}'
                ELSE 'pass true or false' END
            USING ERRCODE = 'TW006';
    END IF;
    v_force := coalesce((v_opts->>'force')::boolean, false);
    IF v_opts->>'run_at' IS NOT NULL AND v_opts->>'delay' IS NOT NULL THEN
        RAISE EXCEPTION 'twice_enqueue: options run_at and delay of kind % are both given: give one', to_jsonb(v_kind)::text
            USING ERRCODE = 'TW006';
    END IF;
    IF v_opts->>'run_at' IS NOT NULL THEN
        BEGIN
            v_run_at := (v_opts->>'run_at')::timestamptz;
        EXCEPTION WHEN data_exception THEN
            v_run_at := NULL;
        END;
        IF v_run_at IS NULL OR NOT isfinite(v_run_at) THEN
            RAISE EXCEPTION 'twice_enqueue: option run_at % of kind % is not a time: pass one like "2026-01-02T03:04:05Z"',
                left(v_opts->'run_at'->>0, 64), to_jsonb(v_kind)::text USING ERRCODE = 'TW006';
        END IF;
    ELSIF v_opts->>'delay' IS NOT NULL THEN
        IF (v_opts->>'delay')::numeric < 0 OR (v_opts->>'delay')::numeric > 3155760000 THEN
            RAISE EXCEPTION 'twice_enqueue: option delay % of kind % is out of range: pass seconds from 0 to 3155760000 (100 years)',
                v_opts->>'delay', to_jsonb(v_kind)::text USING ERRCODE = 'TW006';
        END IF;
        v_run_at := v_now + make_interval(secs => (v_opts->>'delay')::double precision);
    ELSE
        v_run_at := v_now;
    END IF;
    IF v_opts->>'priority' IS NOT NULL THEN
        IF (v_opts->>'priority') !~ '^-?[0-9]+$' OR abs((v_opts->>'priority')::numeric) > 2147483647 THEN
            RAISE EXCEPTION 'twice_enqueue: option priority % of kind % is not a 32-bit integer: pass one like 0 (lower runs first)',
                v_opts->>'priority', to_jsonb(v_kind)::text USING ERRCODE = 'TW006';
        END IF;
        v_priority := (v_opts->>'priority')::integer;
    END IF;
    IF v_opts->>'max_attempts' IS NOT NULL THEN
        IF (v_opts->>'max_attempts') !~ '^[0-9]+$' OR (v_opts->>'max_attempts')::numeric NOT BETWEEN 1 AND 2147483647 THEN
            RAISE EXCEPTION 'twice_enqueue: option max_attempts % of kind % is not a positive integer: use at least 1',
                v_opts->>'max_attempts', to_jsonb(v_kind)::text USING ERRCODE = 'TW006';
        END IF;
        v_max_attempts := (v_opts->>'max_attempts')::integer;
    END IF;
    v_unique_key := coalesce(v_opts->>'unique_key', '');
    IF octet_length(v_unique_key) > max_key_bytes THEN
        RAISE EXCEPTION 'twice_enqueue: unique key %... is % bytes, over the %-byte limit: use a shorter one',
            to_jsonb(left(v_unique_key, 32))::text, octet_length(v_unique_key), max_key_bytes USING ERRCODE = 'TW008';
    END IF;
    IF jsonb_typeof(v_opts->'metadata') = 'object' THEN
        v_metadata := v_opts->'metadata';
        SELECT m.key INTO v_key FROM jsonb_each(v_metadata) AS m
        WHERE jsonb_typeof(m.value) <> 'string' OR octet_length(m.key) > max_key_bytes ORDER BY m.key LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'twice_enqueue: metadata key % of kind % %', to_jsonb(left(v_key, 64))::text, to_jsonb(v_kind)::text,
                CASE WHEN octet_length(v_key) > max_key_bytes
                    THEN format('is %s bytes, over the %s-byte limit: use a shorter one', octet_length(v_key), max_key_bytes)
                    ELSE format('has a JSON %s: metadata values are strings', jsonb_typeof(v_metadata->v_key)) END
                USING ERRCODE = 'TW008';
        END IF;
    END IF;

    -- The catalog.
    SELECT k.queue, nullif(k.max_attempts, 0) AS max_attempts, k.args INTO v_cat FROM twice_kinds AS k WHERE k.kind = v_kind;
    IF NOT FOUND AND NOT v_force THEN
        RAISE EXCEPTION 'twice_enqueue: unknown job kind %: no worker published it to the kind catalog (twice_kinds); '
            'check its spelling, start a worker that registers it, or pass ''{"force": true}'' as opts to store it anyway',
            to_jsonb(v_kind)::text USING ERRCODE = 'TW002';
    END IF;
    -- An empty field list is no list: the catalog stores a kind whose
    -- fields are unknown (its type encodes itself) as [] too.
    v_fields := CASE WHEN jsonb_typeof(v_cat.args) = 'array' AND jsonb_array_length(v_cat.args) > 0 THEN v_cat.args END;
    v_queue := coalesce(v_opts->>'queue', v_cat.queue, 'default');
    v_max_attempts := coalesce(v_max_attempts, v_cat.max_attempts, 20);
    IF v_queue = '' OR octet_length(v_queue) > 128 OR v_queue !~ '^[a-z0-9][a-z0-9_.-]*$' THEN
        RAISE EXCEPTION 'twice_enqueue: queue name % is malformed: %', to_jsonb(left(v_queue, 140))::text,
            CASE
                WHEN v_queue = '' THEN 'name it like "default"'
                WHEN octet_length(v_queue) > 128 THEN format('it is %s bytes, over the 128-byte limit: use a shorter one', octet_length(v_queue))
                WHEN lower(v_queue) <> v_queue THEN format('use %s', to_jsonb(lower(v_queue))::text)
                ELSE 'use lower-case letters, digits, ''_'', ''-'' and ''.'', starting with a letter or digit, like "emails.bulk"'
            END
            USING ERRCODE = 'TW007';
    END IF;

    -- The args: an object, compacted (jsonb's text puts a space after
    -- each ',' and ':' between tokens and nowhere else), within the cap,
    -- each member checked.
    IF args IS NULL THEN
        RAISE EXCEPTION 'twice_enqueue: args of kind % are NULL: pass a JSON object like ''{"user_id": 42}''', to_jsonb(v_kind)::text
            USING ERRCODE = 'TW003';
    END IF;
    IF jsonb_typeof(args) <> 'object' THEN
        RAISE EXCEPTION 'twice_enqueue: args of kind % are a JSON %, not an object: pass one like ''{"user_id": 42}''',
            to_jsonb(v_kind)::text, jsonb_typeof(args) USING ERRCODE = 'TW003';
    END IF;
    v_compact := args::text;
    -- The compact form is at least a third of the text: a far larger text
    -- is refused before the regular expression reads it all.
    IF octet_length(v_compact) <= 3 * max_args_bytes + 2 THEN
        v_compact := regexp_replace(v_compact, '("(?:[^"\\]|\\.)*")|([,:]) ', '\1\2', 'g');
    END IF;
    IF octet_length(v_compact) > max_args_bytes THEN
        RAISE EXCEPTION 'twice_enqueue: args of kind % are % bytes, over the %-byte limit: pass IDs, not data',
            to_jsonb(v_kind)::text, octet_length(v_compact), max_args_bytes USING ERRCODE = 'TW005';
    END IF;
    FOR v_key, v_value IN SELECT a.key, a.value FROM jsonb_each(args) AS a LOOP
        v_problem := twice_args_problem(v_key, v_value, v_fields);
        IF v_problem.code IS NOT NULL THEN
            RAISE EXCEPTION 'twice_enqueue: args of kind %: %', to_jsonb(v_kind)::text, v_problem.message
                USING ERRCODE = v_problem.code;
        END IF;
    END LOOP;

    -- The insert: a new job, or the holder of its unique key. A holder
    -- that finishes between the insert and the look-up frees the key, so
    -- the insert is tried again, as the Go insert does.
    IF current_setting('server_version_num')::integer >= 130000 THEN
        v_msg_id := gen_random_uuid()::text;
    ELSE
        v_msg_id := md5(random()::text || clock_timestamp()::text || pg_backend_pid()::text || random()::text)::uuid::text;
    END IF;
    FOR try IN 1 .. 5 LOOP
        INSERT INTO twice_jobs AS j (kind, queue, priority, args, message_id, idempotency_key, correlation_id,
            unique_key, max_attempts, run_at, created_at, metadata)
        VALUES (v_kind, v_queue, v_priority, convert_to(v_compact, 'UTF8'), v_msg_id, v_msg_id, v_msg_id,
            v_unique_key, v_max_attempts, v_run_at, v_now, v_metadata)
        ON CONFLICT DO NOTHING
        RETURNING j.id INTO v_id;
        IF v_id IS NOT NULL THEN
            -- Delivered on commit, never for a rollback.
            PERFORM pg_notify(twice_channel('twice_insert'), v_queue);
            RETURN v_id;
        END IF;
        SELECT j.id INTO v_id FROM twice_jobs AS j
        WHERE j.kind = v_kind AND j.unique_key = v_unique_key AND j.unique_key <> ''
            AND (j.unique_states & CASE j.state WHEN 'available' THEN 1 WHEN 'running' THEN 2
                WHEN 'completed' THEN 4 WHEN 'dead' THEN 8 WHEN 'discarded' THEN 16 WHEN 'cancelled' THEN 32 ELSE 0 END) <> 0;
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'twice_enqueue: job of kind % kept conflicting with unique jobs inserted and finished concurrently: try again',
        to_jsonb(v_kind)::text USING ERRCODE = 'TW008';
END
$$;

-- Pin every function of this file to this schema (see the top).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION twice_enqueue(text, jsonb, jsonb) SET search_path = %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION twice_args_problem(text, jsonb, jsonb) SET search_path = %I, pg_temp', current_schema());
END
$$;
