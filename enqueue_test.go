package twice_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

func countJobs(t testing.TB, store twicestore.Store) int {
	t.Helper()
	res, err := store.JobList(context.Background(), &twicestore.JobListParams{Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	return len(res.Jobs)
}

func TestEnqueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("envelope and options", func(t *testing.T) {
		t.Parallel()
		store := newStore(t)
		c, err := twice.NewClient(store, testConfig(nil))
		if err != nil {
			t.Fatal(err)
		}
		runAt := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		res, err := c.Enqueue(twice.WithCorrelationID(ctx, "req-42"), emailArgs{UserID: 5, Key: "user-5"},
			&twice.EnqueueOpts{Queue: "critical", Priority: 3, RunAt: runAt, MaxAttempts: 4})
		if err != nil {
			t.Fatal(err)
		}
		j := res.Job
		if j.Kind != "email.partner-verification.v1" || j.Queue != "critical" || j.Priority != 3 || j.MaxAttempts != 4 ||
			!j.RunAt.Equal(runAt) || j.State != twicetype.JobStateAvailable {
			t.Errorf("job = %+v", j)
		}
		if j.Key != "user-5" || j.CorrelationID != "req-42" || len(j.MessageID) != 36 {
			t.Errorf("envelope: key=%q correlation=%q message=%q", j.Key, j.CorrelationID, j.MessageID)
		}
		var args emailArgs
		if err := json.Unmarshal(j.Args, &args); err != nil || args.UserID != 5 {
			t.Errorf("args %s: %v", j.Args, err)
		}
		// Without an IdempotencyKey the message id is the key.
		p, err := c.Enqueue(ctx, pingArgs{N: 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if p.Job.Key != p.Job.MessageID || p.Job.CorrelationID == "" || p.Job.Queue != twice.QueueDefault {
			t.Errorf("defaults: key=%q message=%q correlation=%q queue=%q", p.Job.Key, p.Job.MessageID, p.Job.CorrelationID, p.Job.Queue)
		}
	})

	t.Run("unique key returns the unfinished job as a duplicate", func(t *testing.T) {
		t.Parallel()
		store := newStore(t)
		c, _ := twice.NewClient(store, testConfig(nil))
		a, err := c.Enqueue(ctx, pingArgs{N: 1}, &twice.EnqueueOpts{UniqueKey: "daily-report"})
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.Enqueue(ctx, pingArgs{N: 2}, &twice.EnqueueOpts{UniqueKey: "daily-report"})
		if err != nil {
			t.Fatal(err)
		}
		if a.Duplicate || !b.Duplicate || b.Job.ID != a.Job.ID {
			t.Errorf("first dup=%v, second dup=%v id %d vs %d", a.Duplicate, b.Duplicate, b.Job.ID, a.Job.ID)
		}
		if n := countJobs(t, store); n != 1 {
			t.Errorf("jobs = %d, want 1", n)
		}
	})

	t.Run("EnqueueTx commits with the caller's transaction or not at all", func(t *testing.T) {
		t.Parallel()
		store := newStore(t)
		c, _ := twice.NewClient(store, testConfig(nil))
		tx, err := store.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.EnqueueTx(ctx, tx.Unwrap(), pingArgs{N: 1}, nil); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if n := countJobs(t, store); n != 0 {
			t.Fatalf("after rollback jobs = %d, want 0", n)
		}
		tx, err = store.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.EnqueueManyTx(ctx, tx.Unwrap(), []twice.EnqueueParams{{Args: pingArgs{N: 1}}, {Args: pingArgs{N: 2}}}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if n := countJobs(t, store); n != 2 {
			t.Fatalf("after commit jobs = %d, want 2", n)
		}
		if _, err := c.EnqueueTx(ctx, "not a tx", pingArgs{N: 1}, nil); !errors.Is(err, twicestore.ErrWrongTx) {
			t.Errorf("wrong tx type: err = %v, want ErrWrongTx", err)
		}
	})

	t.Run("bad input is refused and nothing is stored", func(t *testing.T) {
		t.Parallel()
		store := newStore(t)
		reg := twice.NewRegistry()
		twice.MustRegister(reg, twice.HandlerFunc[pingArgs](func(context.Context, *twice.Job[pingArgs]) error { return nil }), nil)
		c, _ := twice.NewClient(store, testConfig(reg))
		cases := []struct {
			name string
			do   func() error
			want string
		}{
			{"oversized payload", func() error {
				_, err := c.Enqueue(ctx, blobArgs{Blob: strings.Repeat("x", 4000)}, nil)
				return err
			}, "over the 2048-byte limit"},
			{"payload policy", func() error {
				_, err := c.Enqueue(ctx, secretArgs{ResetToken: "abc"}, nil)
				return err
			}, "field ResetToken"},
			{"unversioned kind", func() error {
				_, err := c.Enqueue(ctx, unversionedArgs{}, nil)
				return err
			}, "not versioned: end it with .v1"},
			{"one bad job in a batch stores none", func() error {
				_, err := c.EnqueueMany(ctx, []twice.EnqueueParams{{Args: pingArgs{N: 1}}, {Args: secretArgs{}}})
				return err
			}, "nothing stored"},
			{"unknown kind as JSON", func() error {
				_, err := c.EnqueueJSON(ctx, "email.welcom.v1", []byte(`{}`), nil)
				return err
			}, "known kinds: test.ping.v1"},
			{"malformed JSON", func() error {
				_, err := c.EnqueueJSON(ctx, "test.ping.v1", []byte(`{"N":`), nil)
				return err
			}, "not a JSON object"},
			{"JSON with an unknown field", func() error {
				_, err := c.EnqueueJSON(ctx, "test.ping.v1", []byte(`{"M": 1}`), nil)
				return err
			}, `unknown field "M"`},
			{"JSON with a wrong type", func() error {
				_, err := c.EnqueueJSON(ctx, "test.ping.v1", []byte(`{"N": "one"}`), nil)
				return err
			}, "cannot unmarshal string"},
		}
		for _, tc := range cases {
			err := tc.do()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: err = %v, want it to contain %q", tc.name, err, tc.want)
			}
			if !errors.Is(err, twice.ErrInvalidArgs) && !errors.Is(err, twice.ErrUnknownKind) {
				t.Errorf("%s: err = %v wraps neither ErrInvalidArgs nor ErrUnknownKind", tc.name, err)
			}
		}
		if n := countJobs(t, store); n != 0 {
			t.Errorf("jobs stored = %d, want 0", n)
		}
		if _, err := c.EnqueueJSON(ctx, "test.ping.v1", []byte(` { "N" : 3 } `), nil); err != nil {
			t.Errorf("valid JSON refused: %v", err)
		}
	})

	t.Run("EnqueueJSON of a registered kind applies its IdempotencyKey", func(t *testing.T) {
		t.Parallel()
		reg := twice.NewRegistry()
		twice.MustRegister(reg, twice.HandlerFunc[emailArgs](func(context.Context, *twice.Job[emailArgs]) error { return nil }), nil)
		c, _ := twice.NewClient(newStore(t), testConfig(reg))
		res, err := c.EnqueueJSON(ctx, "email.partner-verification.v1", []byte(`{"UserID": 3, "Key": "user-3"}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Job.Key != "user-3" {
			t.Errorf("key = %q, want the args' idempotency key", res.Job.Key)
		}
	})
}

type secretArgs struct{ ResetToken string }

func (secretArgs) Kind() string { return "test.secret.v1" }

type blobArgs struct{ Blob string }

func (blobArgs) Kind() string { return "test.blob.v1" }

type unversionedArgs struct{}

func (unversionedArgs) Kind() string { return "test.unversioned" }

func TestUnknownKindIsKeptAndReportedAsOrphan(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	ctx := context.Background()
	producer, _ := twice.NewClient(store, testConfig(nil))
	orphan, err := producer.Enqueue(ctx, creditArgs{CreditID: 1, Cents: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, c := setupPingOn(t, store)
	ping := enqueuePing(t, c, nil)
	waitJob(t, store, ping.ID, "completed", isState(twicetype.JobStateCompleted))
	row, err := store.JobGet(ctx, &twicestore.JobGetParams{ID: orphan.Job.ID})
	if err != nil {
		t.Fatal(err)
	}
	if row.State != twicetype.JobStateAvailable || row.Attempt != 0 || row.Epoch != 0 {
		t.Errorf("orphan job touched: state=%s attempt=%d epoch=%d", row.State, row.Attempt, row.Epoch)
	}
	var orphans []twicetype.OrphanKind
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for len(orphans) == 0 && time.Now().Before(deadline) {
		// The node heartbeat that makes the worker count as live is written
		// at start; poll until it is visible.
		if orphans, err = c.Orphans(ctx); err != nil {
			t.Fatal(err)
		}
		<-tick.C
	}
	if len(orphans) != 1 || orphans[0].Kind != "balance.credit.v1" || orphans[0].Count != 1 {
		t.Errorf("orphans = %+v, want balance.credit.v1 with 1 job", orphans)
	}
}

func setupPingOn(t *testing.T, store twicestore.Store) (*twice.Registry, *twice.Client) {
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[pingArgs](func(_ context.Context, _ *twice.Job[pingArgs]) error {
		return nil
	}), &twice.KindOpts{Strategy: twice.None})
	return reg, startClient(t, store, testConfig(reg))
}

func TestLogLinesCarryTheEnvelope(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	store := newStore(t)
	reg := twice.NewRegistry()
	child := make(chan string, 1)
	var client *twice.Client
	twice.MustRegister(reg, twice.HandlerFunc[emailArgs](func(ctx context.Context, job *twice.Job[emailArgs]) error {
		twice.Logger(ctx).InfoContext(ctx, "sending verification email")
		res, err := client.Enqueue(ctx, pingArgs{N: 1}, nil)
		if err != nil {
			return err
		}
		select {
		case child <- res.Job.CorrelationID:
		default:
		}
		if job.Attempt == 1 {
			return errors.New("smtp 421")
		}
		return nil
	}), nil)
	cfg := testConfig(reg)
	cfg.Logger = slog.New(slog.NewJSONHandler(&buf, nil))
	client = startClient(t, store, cfg)
	res, err := client.Enqueue(twice.WithCorrelationID(context.Background(), "req-7"), emailArgs{UserID: 1, Key: "u1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, store, res.Job.ID, "completed", isState(twicetype.JobStateCompleted))
	if got := <-child; got != "req-7" {
		t.Errorf("child job correlation = %q, want the parent's req-7", got)
	}
	wantKeys := []string{"job_id", "kind", "queue", "attempt", "message_id", "correlation_id"}
	seen := map[string]bool{}
	for line := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		msg, _ := rec["msg"].(string)
		if msg != "sending verification email" && msg != "job failed; will retry" {
			continue
		}
		seen[msg] = true
		for _, k := range wantKeys {
			if _, ok := rec[k]; !ok {
				t.Errorf("line %q lacks %q", msg, k)
			}
		}
		if rec["correlation_id"] != "req-7" {
			t.Errorf("line %q correlation_id = %v", msg, rec["correlation_id"])
		}
	}
	if !seen["sending verification email"] || !seen["job failed; will retry"] {
		t.Errorf("expected handler and runtime lines, saw %v", seen)
	}
}

// enqueueStores are the stores the name and size tests run on: SQLite, and
// PostgreSQL (where a long queue name used to come back as the database's
// own index error) when TWICE_TEST_POSTGRES is set.
func enqueueStores() map[string]func(t *testing.T) twicestore.Store {
	stores := map[string]func(t *testing.T) twicestore.Store{
		"sqlite": func(t *testing.T) twicestore.Store { return newStore(t) },
	}
	if os.Getenv(pgtest.EnvURL) != "" {
		stores["postgres"] = func(t *testing.T) twicestore.Store {
			u, _ := pgtest.Schema(t, "enqueue")
			s, err := twicepg.Open(context.Background(), u)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
	}
	return stores
}

// TestEnqueueRefusesBadNamesAndKeys: queue names, unique keys and the
// envelope's ids are validated with an error that says what to do, on
// both drivers, and nothing is stored (issue 12 item 6).
func TestEnqueueRefusesBadNamesAndKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, open := range enqueueStores() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := open(t)
			reg := twice.NewRegistry()
			twice.MustRegister(reg, twice.HandlerFunc[pingArgs](func(context.Context, *twice.Job[pingArgs]) error { return nil }), nil)
			c, err := twice.NewClient(store, testConfig(reg))
			if err != nil {
				t.Fatal(err)
			}
			cases := []struct {
				name string
				opts *twice.EnqueueOpts
				want string
			}{
				{"10,000-character queue", &twice.EnqueueOpts{Queue: strings.Repeat("q", 10000)}, "over the 128-byte limit"},
				{"markup in the queue", &twice.EnqueueOpts{Queue: "<script>alert(1)</script>"}, "queue name \"<script>alert(1)</script>\" is malformed"},
				{"upper-case queue", &twice.EnqueueOpts{Queue: "Emails"}, `use "emails"`},
				{"NUL in the queue", &twice.EnqueueOpts{Queue: "a\x00b"}, "contains a NUL byte"},
				{"100 KB unique key", &twice.EnqueueOpts{UniqueKey: strings.Repeat("k", 100<<10)}, "unique key \"kkkk"},
				{"invalid UTF-8 in the unique key", &twice.EnqueueOpts{UniqueKey: "a\xffb"}, "unique key \"a\\xffb\" is not valid UTF-8"},
				{"NUL in the unique key", &twice.EnqueueOpts{UniqueKey: "a\x00b"}, "contains a NUL byte"},
				{"NUL in the message id", &twice.EnqueueOpts{MessageID: "m\x00"}, "message id"},
				{"long correlation id", &twice.EnqueueOpts{CorrelationID: strings.Repeat("c", 513)}, "correlation id"},
			}
			for _, tc := range cases {
				_, err := c.Enqueue(ctx, pingArgs{N: 1}, tc.opts)
				if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, twice.ErrInvalidArgs) {
					t.Errorf("%s: err = %v, want ErrInvalidArgs containing %q", tc.name, err, tc.want)
				}
				if err != nil && len(err.Error()) > 500 {
					t.Errorf("%s: the error is %d bytes long: quote the value cut short", tc.name, len(err.Error()))
				}
				_, err = c.EnqueueJSON(ctx, "test.ping.v1", []byte(`{"N":1}`), tc.opts)
				if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, twice.ErrInvalidArgs) {
					t.Errorf("%s as JSON: err = %v, want ErrInvalidArgs containing %q", tc.name, err, tc.want)
				}
			}
			if n := countJobs(t, store); n != 0 {
				t.Errorf("jobs stored = %d, want 0", n)
			}
			// The limits themselves are accepted.
			if _, err := c.Enqueue(ctx, pingArgs{N: 1}, &twice.EnqueueOpts{
				Queue: strings.Repeat("q", twice.MaxQueueBytes), UniqueKey: strings.Repeat("k", twice.MaxKeyBytes),
				MessageID: strings.Repeat("m", twice.MaxKeyBytes), CorrelationID: "é" + strings.Repeat("c", twice.MaxKeyBytes-2),
			}); err != nil {
				t.Errorf("names at the limits refused: %v", err)
			}
		})
	}
}

// TestQueueNamesAreValidatedWhereTheyAreSet: a bad queue is refused at
// registration and in the Config, not only at enqueue (issue 12 item 6).
func TestQueueNamesAreValidatedWhereTheyAreSet(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("q", 10000)
	handler := twice.HandlerFunc[pingArgs](func(context.Context, *twice.Job[pingArgs]) error { return nil })
	for _, q := range []string{long, "<script>", "a b", "-dash-first"} {
		err := twice.Register(twice.NewRegistry(), handler, &twice.KindOpts{Queue: q})
		if err == nil || !strings.Contains(err.Error(), "KindOpts.Queue: queue name") {
			t.Errorf("Register with queue %.20q: err = %v, want the queue refused", q, err)
		}
		cfg := testConfig(nil)
		cfg.Queues = []twice.QueueConfig{{Name: q}}
		if _, err := twice.NewClient(newStore(t), cfg); err == nil || !strings.Contains(err.Error(), "Config.Queues: queue name") {
			t.Errorf("Config.Queues with %.20q: err = %v, want the queue refused", q, err)
		}
		cfg = testConfig(nil)
		cfg.DefaultQueue = q
		if _, err := twice.NewClient(newStore(t), cfg); err == nil || !strings.Contains(err.Error(), "Config.DefaultQueue: queue name") {
			t.Errorf("Config.DefaultQueue %.20q: err = %v, want the queue refused", q, err)
		}
	}
	for _, q := range []string{twice.QueueDefault, twice.QueueCritical, twice.QueueBulk, "emails.bulk", "tenant-42", "q_1"} {
		if err := twice.ValidateQueue(q); err != nil {
			t.Errorf("ValidateQueue(%q) = %v", q, err)
		}
	}
}

// TestEnqueueJSONAppliesThePayloadPolicy: raw JSON for a kind only a live
// worker knows gets the name rule that Go fields get, so
// {"password":…,"email":…} is not stored; once the worker's node has put
// the kind's fields in the catalog, unknown fields and wrong JSON types are
// refused too (issue 12 item 5c).
func TestEnqueueJSONAppliesThePayloadPolicy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, open := range enqueueStores() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := open(t)
			now := time.Now()
			if err := store.NodeHeartbeat(ctx, &twicestore.NodeHeartbeatParams{Node: &twicetype.Node{
				ID: "pdf-worker", Kinds: []string{"pdf.cv.v1"}, Queues: []string{"default"}, StartedAt: now, HeartbeatAt: now,
			}}); err != nil {
				t.Fatal(err)
			}
			c, _ := twice.NewClient(store, testConfig(nil))
			refuse := func(raw, want string) {
				t.Helper()
				_, err := c.EnqueueJSON(ctx, "pdf.cv.v1", []byte(raw), nil)
				if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, twice.ErrInvalidArgs) {
					t.Errorf("EnqueueJSON(%s): err = %v, want ErrInvalidArgs containing %q", raw, err, want)
				}
			}
			// Not catalogued: the name rule.
			refuse(`{"cv_id":3,"password":"hunter2","email":"a@example.com"}`, `key "password" looks like a secret`)
			refuse(`{"cv_id":3,"Email":"a@example.com"}`, `key "Email" looks like personal data`)
			if n := countJobs(t, store); n != 0 {
				t.Fatalf("jobs stored = %d, want 0", n)
			}
			if _, err := c.EnqueueJSON(ctx, "pdf.cv.v1", []byte(`{"cv_id":3,"email_id":4}`), nil); err != nil {
				t.Fatalf("IDs refused: %v", err)
			}
			// Catalogued: the kind's own fields.
			if err := store.CatalogPublish(ctx, &twicestore.CatalogPublishParams{Node: "pdf-worker", Kinds: []twicetype.KindInfo{{
				Kind: "pdf.cv.v1", Queue: "default", Strategy: "ClaimAfter", MaxAttempts: 20,
				Args: []twicetype.ArgField{{Name: "cv_id", Type: twicetype.ArgTypeInteger}},
			}}}); err != nil {
				t.Fatal(err)
			}
			refuse(`{"cv_id":3,"email_id":4}`, `unknown field "email_id": the kind's fields are cv_id`)
			refuse(`{"cv_id":"3"}`, `field "cv_id" is string, want integer`)
			if _, err := c.EnqueueJSON(ctx, "pdf.cv.v1", []byte(`{"cv_id":3}`), nil); err != nil {
				t.Fatalf("catalogued fields refused: %v", err)
			}
			if n := countJobs(t, store); n != 2 {
				t.Fatalf("jobs stored = %d, want 2", n)
			}
		})
	}
}

// TestUnknownFieldInStoredArgsIsPermanent: a handler decodes its args
// strictly, so a field its type does not declare dead-letters the job at
// once with an error naming the field, instead of being dropped while the
// job completes (issue 12 item 5c).
func TestUnknownFieldInStoredArgsIsPermanent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore(t)
	var calls atomic.Int32
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[pingArgs](func(context.Context, *twice.Job[pingArgs]) error {
		calls.Add(1)
		return nil
	}), &twice.KindOpts{Strategy: twice.None,
		// The stored job carries a field the type lacks on purpose: the
		// drift guard at Start would otherwise refuse to start.
		ArgsChangeAllowed: "the test stores a job with an unknown field"})
	now := time.Now()
	// Stored as another producer (or an older CLI) would: not through
	// Enqueue, which would refuse it.
	res, err := store.JobInsertMany(ctx, &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{{
		Kind: "test.ping.v1", Queue: twice.QueueDefault, Args: []byte(`{"N":1,"password":"hunter2"}`),
		MessageID: "m-1", Key: "m-1", CorrelationID: "c-1", MaxAttempts: 5, RunAt: now, CreatedAt: now,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	startClient(t, store, testConfig(reg))
	row := waitJob(t, store, res.Jobs[0].Job.ID, "dead", isState(twicetype.JobStateDead))
	if row.Attempt != 1 || len(row.Errors) == 0 || !strings.Contains(row.Errors[len(row.Errors)-1].Error, `unknown field "password"`) {
		t.Errorf("attempt %d, errors %+v: want one attempt failing on the unknown field", row.Attempt, row.Errors)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("handler ran %d times, want 0", n)
	}
}
