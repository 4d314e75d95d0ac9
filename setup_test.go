package twice_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/sqlitetemplate"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newStore opens a fresh SQLite store in the test's temp dir.
func newStore(t testing.TB) *twicesqlite.Store {
	t.Helper()
	return openStore(t, migratedPath(t))
}

// migratedPath returns the path of a new, freshly migrated SQLite file in
// the test's temp dir: a copy of one migrated once for the whole test
// binary (see sqlitetemplate).
func migratedPath(t testing.TB) string {
	t.Helper()
	return sqlitetemplate.Copy(t, "twice", func(path string) error {
		s, err := twicesqlite.Open(context.Background(), path)
		if err != nil {
			return err
		}
		return s.Close()
	})
}

func openStore(t testing.TB, path string) *twicesqlite.Store {
	t.Helper()
	s, err := twicesqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// testConfig is a config tuned for fast tests: quick polls and retries.
func testConfig(reg *twice.Registry) twice.Config {
	return twice.Config{
		Registry:     reg,
		PollInterval: 20 * time.Millisecond,
		Backoff:      func(int) time.Duration { return time.Millisecond },
		Logger:       discardLogger(),
	}
}

// startClient starts a client and stops it when the test ends.
func startClient(t testing.TB, store twicestore.Store, cfg twice.Config) *twice.Client {
	t.Helper()
	c, err := twice.NewClient(store, cfg)
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("start client: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c
}

// waitJob waits until the job satisfies cond, failing the test after
// waitfor.Timeout.
func waitJob(t testing.TB, store twicestore.Store, id int64, what string, cond func(*twicetype.JobRow) bool) *twicetype.JobRow {
	t.Helper()
	var row *twicetype.JobRow
	waitfor.Cond(t, fmt.Sprintf("job %d to become %s", id, what), func() bool {
		var err error
		row, err = store.JobGet(context.Background(), &twicestore.JobGetParams{ID: id})
		if err != nil {
			t.Fatalf("get job %d: %v", id, err)
		}
		return cond(row)
	}, func() string {
		return fmt.Sprintf("state=%s attempt=%d note=%q errors=%v", row.State, row.Attempt, row.Note, row.Errors)
	})
	return row
}

func isState(s twicetype.JobState) func(*twicetype.JobRow) bool {
	return func(r *twicetype.JobRow) bool { return r.State == s }
}

// callLog records the order of effects and marker operations.
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, s)
}

func (l *callLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.calls...)
}

func (l *callLog) count(s string) int {
	n := 0
	for _, c := range l.get() {
		if c == s {
			n++
		}
	}
	return n
}

// recordingStore wraps the real store and records marker calls in a log,
// so tests can check what the runtime did around the handler and in which
// order.
type recordingStore struct {
	twicestore.Store
	log *callLog
}

func (s *recordingStore) MarkerPeek(ctx context.Context, p *twicestore.MarkerParams) (*twicestore.MarkerPeekResult, error) {
	s.log.add("peek")
	return s.Store.MarkerPeek(ctx, p)
}

// JobFetch records, as a peek, each leased job whose marker the fetch
// peeked: the peek a ClaimAfter job makes comes with its fetch.
func (s *recordingStore) JobFetch(ctx context.Context, p *twicestore.JobFetchParams) (*twicestore.JobFetchResult, error) {
	res, err := s.Store.JobFetch(ctx, p)
	if err == nil && len(res.Processed) == len(res.Jobs) {
		for _, j := range res.Jobs {
			if _, ok := p.Peek[j.Kind]; ok {
				s.log.add("peek")
			}
		}
	}
	return res, err
}

func (s *recordingStore) MarkerClaim(ctx context.Context, p *twicestore.MarkerParams) (*twicestore.MarkerClaimResult, error) {
	s.log.add("claim")
	return s.Store.MarkerClaim(ctx, p)
}

// JobFinish records the claims that ride with completions.
func (s *recordingStore) JobFinish(ctx context.Context, p *twicestore.JobFinishParams) (*twicestore.JobFinishResult, error) {
	for _, o := range p.Outcomes {
		if o.Marker != nil {
			s.log.add("claim")
		}
	}
	return s.Store.JobFinish(ctx, p)
}

func (s *recordingStore) MarkerRelease(ctx context.Context, p *twicestore.MarkerParams) error {
	s.log.add("release")
	return s.Store.MarkerRelease(ctx, p)
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func markerProcessed(t testing.TB, store twicestore.Store, handler, key string) bool {
	t.Helper()
	res, err := store.MarkerPeek(context.Background(), &twicestore.MarkerParams{Handler: handler, Key: key})
	if err != nil {
		t.Fatalf("peek marker: %v", err)
	}
	return res.Processed
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
