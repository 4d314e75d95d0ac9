package twicepg

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// sqlPingArgs is the kind the SQL enqueue tests publish and run.
type sqlPingArgs struct {
	UserID int64  `json:"user_id"`
	Note   string `json:"note,omitempty"`
}

func (sqlPingArgs) Kind() string { return "sqlenq.ping.v1" }

// discardLogger keeps the workers of these tests quiet.
func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// sqlSetup is a schema with twice's migrations, a store on it and a
// connection of the test's own, in the role of an application that
// enqueues from SQL.
type sqlSetup struct {
	store      *Store
	connString string
	schema     string
	conn       *pgx.Conn
}

func newSQLSetup(t *testing.T) sqlSetup {
	t.Helper()
	connString, schema := newSchema(t)
	store := openAt(t, connString)
	conn := connect(t, t.Context(), connString)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return sqlSetup{store: store, connString: connString, schema: schema, conn: conn}
}

// publish puts kind in the catalog with fields (nil: no published fields).
func (s sqlSetup) publish(t *testing.T, kind, queue string, fields []twicetype.ArgField) {
	t.Helper()
	if err := s.store.CatalogPublish(t.Context(), &twicestore.CatalogPublishParams{Node: "sql-test",
		Kinds: []twicetype.KindInfo{{Kind: kind, Queue: queue, MaxAttempts: 7, Args: fields}}}); err != nil {
		t.Fatal(err)
	}
}

// jobCount counts the jobs the test's connection sees.
func (s sqlSetup) jobCount(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) int {
	t.Helper()
	var n int
	if err := q.QueryRow(t.Context(), `SELECT count(*) FROM twice_jobs`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// sqlState returns err's SQLSTATE and message, or "" for another error.
func sqlState(err error) (code, msg string) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code, pe.Message
	}
	return "", ""
}

// TestSQLEnqueueRollbackCommitAndWorker is the psql check from Go:
// an enqueue in a rolled-back transaction leaves no job; a committed one
// is a job with the envelope Go would give it, which a twice worker on
// the schema runs exactly once.
func TestSQLEnqueueRollbackCommitAndWorker(t *testing.T) {
	t.Parallel()
	s := newSQLSetup(t)
	ctx := t.Context()

	var runs atomic.Int32
	ran := make(chan int64, 10)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[sqlPingArgs](func(_ context.Context, j *twice.Job[sqlPingArgs]) error {
		runs.Add(1)
		ran <- j.Args.UserID
		return nil
	}), &twice.KindOpts{Queue: "sqlq"})
	c, err := twice.NewClient(s.store, twice.Config{Registry: reg, Queues: []twice.QueueConfig{{Name: "sqlq", Concurrency: 2}},
		Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(stopCtx)
	})

	tx, err := s.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := tx.QueryRow(ctx, `SELECT twice_enqueue('sqlenq.ping.v1', '{"user_id": 1}')`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := s.jobCount(t, s.conn); n != 0 {
		t.Fatalf("after ROLLBACK: %d jobs, want 0", n)
	}

	tx, err = s.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, `SELECT twice_enqueue('sqlenq.ping.v1', '{"user_id": 2}', '{"priority": 3}')`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := waitfor.Recv(t, ran, "the worker to run the job enqueued from SQL"); got != 2 {
		t.Fatalf("the worker ran user_id %d, want 2", got)
	}
	var state string
	waitfor.Cond(t, "the job to complete", func() bool {
		_ = s.conn.QueryRow(ctx, `SELECT state FROM twice_jobs WHERE id = $1`, id).Scan(&state)
		return state == "completed"
	}, func() string { return state })

	var (
		kind, queue, args, msgID, key, corr, ukey, meta string
		prio, maxAttempts                               int
		runAt, createdAt                                time.Time
	)
	if err := s.conn.QueryRow(ctx, `SELECT kind, queue, convert_from(args, 'UTF8'), message_id, idempotency_key,
		correlation_id, unique_key, metadata::text, priority, max_attempts, run_at, created_at
		FROM twice_jobs WHERE id = $1`, id).Scan(&kind, &queue, &args, &msgID, &key, &corr, &ukey, &meta,
		&prio, &maxAttempts, &runAt, &createdAt); err != nil {
		t.Fatal(err)
	}
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	switch {
	case kind != "sqlenq.ping.v1", queue != "sqlq", args != `{"user_id":2}`, prio != 3,
		maxAttempts != twice.MaxAttemptsDefault, ukey != "", meta != "{}":
		t.Errorf("job = kind %q queue %q args %s priority %d max_attempts %d unique_key %q metadata %s, "+
			"want the catalog's queue sqlq, compact args, priority 3, %d attempts, no key, no metadata",
			kind, queue, args, prio, maxAttempts, ukey, meta, twice.MaxAttemptsDefault)
	case !uuid.MatchString(msgID) || key != msgID || corr != msgID:
		t.Errorf("message id %q, idempotency key %q, correlation id %q: want one new UUID for all three", msgID, key, corr)
	case runAt.Before(createdAt):
		t.Errorf("run_at %v before created_at %v", runAt, createdAt)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1", n)
	}
	if n := s.jobCount(t, s.conn); n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
}

// TestSQLEnqueueNotifiesOnCommit: the wake-up goes out on the channel Go's
// listeners use, on commit only.
func TestSQLEnqueueNotifiesOnCommit(t *testing.T) {
	t.Parallel()
	s := newSQLSetup(t)
	ctx := t.Context()
	listener := connect(t, ctx, s.connString)
	t.Cleanup(func() { _ = listener.Close(context.Background()) })
	if _, err := listener.Exec(ctx, "LISTEN "+pgx.Identifier{channelFor(s.schema)}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	for _, end := range []string{"ROLLBACK", "COMMIT"} {
		tx, err := s.conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		q := strings.ToLower(end)
		if _, err := tx.Exec(ctx, `SELECT twice_enqueue('any.kind.v1', '{}', jsonb_build_object('force', true, 'queue', $1::text))`, q); err != nil {
			t.Fatal(err)
		}
		if end == "COMMIT" {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// Notifications arrive in commit order: the first is the commit's,
	// so the rolled-back enqueue sent none.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := listener.WaitForNotification(wctx)
	if err != nil {
		t.Fatalf("wait for the insert notification: %v", err)
	}
	if n.Channel != channelFor(s.schema) || n.Payload != "commit" {
		t.Fatalf("notification %q on %q, want \"commit\" on %q", n.Payload, n.Channel, channelFor(s.schema))
	}
}

// TestSQLEnqueueChannelOfLongSchema: a schema name too long for a channel
// is hashed as channelFor hashes it.
func TestSQLEnqueueChannelOfLongSchema(t *testing.T) {
	t.Parallel()
	s := newSQLSetup(t)
	ctx := t.Context()
	long := s.schema + "_" + strings.Repeat("x", 60-len(s.schema))
	if _, err := s.conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{long}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn := connect(t, context.Background(), s.connString)
		defer conn.Close(context.Background())
		_, _ = conn.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{long}.Sanitize())
	})
	tx, err := s.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, "SET LOCAL search_path = "+pgx.Identifier{long}.Sanitize()+", "+pgx.Identifier{s.schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`SELECT twice_channel('twice_insert')`, `SELECT twice_insert_channel()`} {
		var got string
		if err := tx.QueryRow(ctx, q).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := channelFor(long); got != want {
			t.Errorf("%s = %q, want %q", q, got, want)
		}
	}
}

// sqlRefusal is one call twice_enqueue must refuse.
type sqlRefusal struct {
	name       string
	kind       any // string or nil
	args, opts any // JSON text or nil
	code       string
	want       string // in the message
}

// TestSQLEnqueueRefusals: every refusal raises its documented SQLSTATE
// with a message that says what to do, stores nothing, and leaves the
// caller's transaction usable after a rollback to a savepoint.
func TestSQLEnqueueRefusals(t *testing.T) {
	t.Parallel()
	s := newSQLSetup(t)
	ctx := t.Context()
	s.publish(t, "sqlenq.ping.v1", "default", []twicetype.ArgField{{Name: "user_id", Type: "integer"}, {Name: "note", Type: "string"}})
	s.publish(t, "sqlenq.shapeless.v1", "default", nil)
	big := `{"blob": "` + strings.Repeat("x", twice.MaxArgsBytesDefault) + `"}`
	mib := `{"blob": "` + strings.Repeat("x", 1<<20) + `"}`
	cases := []sqlRefusal{
		{"NULL kind", nil, `{}`, `{}`, SQLStateInvalidKind, "kind is NULL"},
		{"unversioned kind", "sqlenq.ping", `{}`, `{}`, SQLStateInvalidKind, "end it with .v1"},
		{"upper-case kind", "SQLenq.ping.v1", `{}`, `{}`, SQLStateInvalidKind, `use "sqlenq.ping.v1"`},
		{"long kind", "a." + strings.Repeat("b", 300) + ".v1", `{}`, `{}`, SQLStateInvalidKind, "over the 255-byte limit"},
		{"unknown kind", "sqlenq.pnig.v1", `{}`, `{}`, SQLStateUnknownKind, `unknown job kind "sqlenq.pnig.v1"`},
		{"NULL args", "sqlenq.ping.v1", nil, `{}`, SQLStateInvalidArgs, "args of kind \"sqlenq.ping.v1\" are NULL"},
		{"args an array", "sqlenq.ping.v1", `[1]`, `{}`, SQLStateInvalidArgs, "not an object"},
		{"args a string", "sqlenq.ping.v1", `"x"`, `{}`, SQLStateInvalidArgs, "not an object"},
		{"wrong field type", "sqlenq.ping.v1", `{"user_id": "1"}`, `{}`, SQLStateInvalidArgs, `field "user_id" is string, want integer`},
		{"fraction for an integer", "sqlenq.ping.v1", `{"user_id": 1.5}`, `{}`, SQLStateInvalidArgs, `field "user_id" is number, want integer`},
		{"unknown field", "sqlenq.ping.v1", `{"user_id": 1, "password": "x"}`, `{}`, SQLStateInvalidArgs, `unknown field "password": the kind's fields are user_id, note`},
		{"field in another case", "sqlenq.ping.v1", `{"User_ID": 1}`, `{}`, SQLStateInvalidArgs, `did you mean "user_id"?`},
		{"email without published fields", "sqlenq.shapeless.v1", `{"email": "x"}`, `{}`, SQLStateSensitiveArgs, `key "email" looks like personal data`},
		{"secret of a forced kind", "sqlenq.unknown.v1", `{"apiToken": "x"}`, `{"force": true}`, SQLStateSensitiveArgs, `("token")`},
		{"nested object", "sqlenq.shapeless.v1", `{"user": {"id": 1}}`, `{}`, SQLStateInvalidArgs, `key "user" has an object`},
		{"array of objects", "sqlenq.shapeless.v1", `{"users": [[{"id": 1}]]}`, `{}`, SQLStateInvalidArgs, `key "users" has an object`},
		{"oversized", "sqlenq.shapeless.v1", big, `{}`, SQLStateArgsTooLarge, "over the 2048-byte limit: pass IDs, not data"},
		{"1 MiB", "sqlenq.shapeless.v1", mib, `{}`, SQLStateArgsTooLarge, "over the 2048-byte limit"},
		{"unknown opts key", "sqlenq.ping.v1", `{}`, `{"queue": "default", "retries": 3}`, SQLStateInvalidOpts, `unknown option "retries"`},
		{"opts an array", "sqlenq.ping.v1", `{}`, `[]`, SQLStateInvalidOpts, "not an object"},
		{"bad run_at", "sqlenq.ping.v1", `{}`, `{"run_at": "tomorrow-ish"}`, SQLStateInvalidOpts, `run_at tomorrow-ish of kind "sqlenq.ping.v1" is not a time`},
		{"infinite run_at", "sqlenq.ping.v1", `{}`, `{"run_at": "infinity"}`, SQLStateInvalidOpts, "is not a time"},
		{"run_at a number", "sqlenq.ping.v1", `{}`, `{"run_at": 5}`, SQLStateInvalidOpts, "pass a timestamp text"},
		{"delay as interval text", "sqlenq.ping.v1", `{}`, `{"delay": "5 minutes"}`, SQLStateInvalidOpts, "pass a number of seconds"},
		{"negative delay", "sqlenq.ping.v1", `{}`, `{"delay": -1}`, SQLStateInvalidOpts, "out of range"},
		{"run_at and delay", "sqlenq.ping.v1", `{}`, `{"delay": 1, "run_at": "2030-01-01T00:00:00Z"}`, SQLStateInvalidOpts, "give one"},
		{"fractional priority", "sqlenq.ping.v1", `{}`, `{"priority": 1.5}`, SQLStateInvalidOpts, "not a 32-bit integer"},
		{"huge priority", "sqlenq.ping.v1", `{}`, `{"priority": 99999999999}`, SQLStateInvalidOpts, "not a 32-bit integer"},
		{"zero max_attempts", "sqlenq.ping.v1", `{}`, `{"max_attempts": 0}`, SQLStateInvalidOpts, "use at least 1"},
		{"force a string", "sqlenq.ping.v1", `{}`, `{"force": "yes"}`, SQLStateInvalidOpts, "pass true or false"},
		{"bad queue", "sqlenq.ping.v1", `{}`, `{"queue": "<script>"}`, SQLStateInvalidQueue, `queue name "<script>" is malformed`},
		{"upper-case queue", "sqlenq.ping.v1", `{}`, `{"queue": "Emails"}`, SQLStateInvalidQueue, `use "emails"`},
		{"empty queue", "sqlenq.ping.v1", `{}`, `{"queue": ""}`, SQLStateInvalidQueue, `name it like "default"`},
		{"long queue", "sqlenq.ping.v1", `{}`, `{"queue": "` + strings.Repeat("q", 200) + `"}`, SQLStateInvalidQueue, "over the 128-byte limit"},
		{"long unique key", "sqlenq.ping.v1", `{}`, `{"unique_key": "` + strings.Repeat("k", 513) + `"}`, SQLStateInvalidKey, "over the 512-byte limit"},
		{"metadata not strings", "sqlenq.ping.v1", `{}`, `{"metadata": {"n": 1}}`, SQLStateInvalidKey, `metadata key "n"`},
	}
	tx, err := s.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	for _, tc := range cases {
		if _, err := tx.Exec(ctx, `SAVEPOINT enqueue`); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var id int64
		err := tx.QueryRow(ctx, `SELECT twice_enqueue($1::text, $2::jsonb, coalesce($3::jsonb, '{}'))`, tc.kind, tc.args, tc.opts).Scan(&id)
		code, msg := sqlState(err)
		if code != tc.code || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: got id %d, err %v (SQLSTATE %q), want SQLSTATE %s with %q", tc.name, id, err, code, tc.code, tc.want)
		}
		if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT enqueue`); err != nil {
			t.Fatalf("%s: the transaction is not usable after a rollback to the savepoint: %v", tc.name, err)
		}
	}
	// The caller's transaction goes on: its own writes and an enqueue.
	var id int64
	if err := tx.QueryRow(ctx, `SELECT twice_enqueue('sqlenq.ping.v1', '{"user_id": 1, "note": null}')`).Scan(&id); err != nil {
		t.Fatalf("enqueue after the refusals: %v", err)
	}
	if n := s.jobCount(t, tx); n != 1 {
		t.Fatalf("%d jobs after %d refusals and one enqueue, want 1", n, len(cases))
	}
}

// TestSQLEnqueueNULAndEncoding: a NUL byte or invalid UTF-8 never reaches
// the function: jsonb and text refuse them first, with PostgreSQL's own
// SQLSTATE, and nothing is stored.
func TestSQLEnqueueNULAndEncoding(t *testing.T) {
	t.Parallel()
	s := newSQLSetup(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name     string
		kind     string
		args     string
		wantCode string
	}{
		{"\\u0000 in args", "sqlenq.any.v1", `{"note": "a\u0000b"}`, "22P05"},
		{"NUL in the kind", "sqlenq\x00.any.v1", `{}`, "22021"},
		{"invalid UTF-8 in the kind", "sqlenq\xff.any.v1", `{}`, "22021"},
	} {
		_, err := s.conn.Exec(ctx, `SELECT twice_enqueue($1::text, $2::jsonb, '{"force": true}')`, tc.kind, tc.args)
		if code, _ := sqlState(err); code != tc.wantCode {
			t.Errorf("%s: err %v, want SQLSTATE %s", tc.name, err, tc.wantCode)
		}
	}
	if n := s.jobCount(t, s.conn); n != 0 {
		t.Fatalf("%d jobs, want 0", n)
	}
}

// TestSQLEnqueueDefaultsAndOptions: the catalog's queue and attempts, the
// options, and the compact args bytes.
func TestSQLEnqueueDefaultsAndOptions(t *testing.T) {
	t.Parallel()
	s := newSQLSetup(t)
	ctx := t.Context()
	s.publish(t, "sqlenq.ping.v1", "pings", []twicetype.ArgField{{Name: "user_id", Type: "integer"}, {Name: "tags", Type: "array"}})
	type row struct {
		queue, args, meta string
		prio, attempts    int
		delayed           bool
	}
	for _, tc := range []struct {
		name, kind, args, opts string
		want                   row
	}{
		{"catalog defaults", "sqlenq.ping.v1", `{"user_id": 1, "tags": ["a, b: c", 2]}`, `{}`,
			row{"pings", `{"tags":["a, b: c",2],"user_id":1}`, "{}", 0, 7, false}},
		{"every option", "sqlenq.ping.v1", `{"user_id": 1}`,
			`{"queue": "other", "priority": -2, "max_attempts": 3, "delay": 3600, "metadata": {"source": "psql"}}`,
			row{"other", `{"user_id":1}`, `{"source": "psql"}`, -2, 3, true}},
		{"run_at", "sqlenq.ping.v1", `{}`, `{"run_at": "2999-01-02T03:04:05Z"}`, row{"pings", `{}`, "{}", 0, 7, true}},
		{"null options are defaults", "sqlenq.ping.v1", `{}`, `{"queue": null, "run_at": null}`, row{"pings", `{}`, "{}", 0, 7, false}},
		{"forced kind", "sqlenq.other.v1", `{"order_id": 9}`, `{"force": true}`, row{"default", `{"order_id":9}`, "{}", 0, 20, false}},
	} {
		var id int64
		if err := s.conn.QueryRow(ctx, `SELECT twice_enqueue($1, $2::jsonb, $3::jsonb)`, tc.kind, tc.args, tc.opts).Scan(&id); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got row
		if err := s.conn.QueryRow(ctx, `SELECT queue, convert_from(args, 'UTF8'), metadata::text, priority, max_attempts,
			run_at > created_at + interval '1 minute' FROM twice_jobs WHERE id = $1`, id).Scan(
			&got.queue, &got.args, &got.meta, &got.prio, &got.attempts, &got.delayed); err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("%s: job %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestSQLEnqueueUnique: a held unique key returns its holder's id and
// stores nothing; once the holder finished the key is free.
func TestSQLEnqueueUnique(t *testing.T) {
	t.Parallel()
	s := newSQLSetup(t)
	ctx := t.Context()
	s.publish(t, "sqlenq.ping.v1", "default", nil)
	enqueue := func(userID int) int64 {
		t.Helper()
		var id int64
		if err := s.conn.QueryRow(ctx, `SELECT twice_enqueue('sqlenq.ping.v1', jsonb_build_object('user_id', $1::int),
			'{"unique_key": "user-1"}')`, userID).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	first := enqueue(1)
	if again := enqueue(2); again != first {
		t.Fatalf("duplicate unique_key returned id %d, want the first job's %d", again, first)
	}
	if n := s.jobCount(t, s.conn); n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
	// A Go enqueue of the same kind and key agrees.
	c, err := twice.NewClient(s.store, twice.Config{Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.EnqueueJSON(ctx, "sqlenq.ping.v1", []byte(`{}`), &twice.EnqueueOpts{UniqueKey: "user-1"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Duplicate || res.Job.ID != first {
		t.Fatalf("Go enqueue of the key: duplicate %v id %d, want the SQL job %d", res.Duplicate, res.Job.ID, first)
	}
	if _, err := s.conn.Exec(ctx, `UPDATE twice_jobs SET state = 'completed', finished_at = now() WHERE id = $1`, first); err != nil {
		t.Fatal(err)
	}
	if next := enqueue(3); next == first {
		t.Fatalf("the key of a completed job still returned %d", first)
	}
}

// TestSQLEnqueueUniqueRace: two transactions enqueue the same unique key;
// the second waits on the first's uncommitted row and, once it commits,
// returns its id, as a Go insert would.
func TestSQLEnqueueUniqueRace(t *testing.T) {
	t.Parallel()
	s := newSQLSetup(t)
	ctx := t.Context()
	const enqueue = `SELECT twice_enqueue('sqlenq.race.v1', '{}', '{"force": true, "unique_key": "one"}')`
	first, err := s.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Rollback(context.Background()) }()
	var firstID int64
	if err := first.QueryRow(ctx, enqueue).Scan(&firstID); err != nil {
		t.Fatal(err)
	}
	other := connect(t, ctx, s.connString)
	t.Cleanup(func() { _ = other.Close(context.Background()) })
	var pid int
	if err := other.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	type result struct {
		id  int64
		err error
	}
	second := make(chan result, 1)
	go func() {
		var r result
		r.err = other.QueryRow(ctx, enqueue).Scan(&r.id)
		second <- r
	}()
	var waiting string
	waitfor.Cond(t, "the second enqueue to wait on the first's row", func() bool {
		_ = s.store.pool.QueryRow(ctx, `SELECT coalesce(wait_event_type, '') FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting)
		return waiting == "Lock"
	}, func() string { return waiting })
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := waitfor.Recv(t, second, "the second enqueue to return")
	if r.err != nil || r.id != firstID {
		t.Fatalf("second enqueue: id %d, err %v; want the first's id %d", r.id, r.err, firstID)
	}
	if n := s.jobCount(t, s.conn); n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
}

// TestMigration019OnSchemaAt018: twice_enqueue arrives on a database a
// twice of migration 018 made, and works on its jobs.
func TestMigration019OnSchemaAt018(t *testing.T) {
	t.Parallel()
	old := openOldSchema(t, 18).(oldSchema)
	old.InsertJob(t, "k1", twicetype.JobStateAvailable)
	if _, err := old.conn.Exec(t.Context(), `SELECT twice_enqueue('k.v1', '{}', '{"force": true}')`); err == nil {
		t.Fatal("twice_enqueue exists at migration 018")
	}
	old.Upgrade(t)
	var id int64
	if err := old.conn.QueryRow(t.Context(), `SELECT twice_enqueue('k.v1', '{}', '{"force": true, "unique_key": "k1"}')`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := old.conn.QueryRow(t.Context(), `SELECT count(*) FROM twice_jobs`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d jobs (%v): the old job holds k1, want it returned (id %d)", n, err, id)
	}
}
