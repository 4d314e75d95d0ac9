package peeker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/twicejobs/twice/internal/pgtest"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicesqlite"
	"github.com/twicejobs/twice/twicestore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// store is the real SQLite store whose MarkerPeekMany records batch sizes,
// can hold its first call at a gate, and can fail.
type store struct {
	*twicesqlite.Store
	mu      sync.Mutex
	batches []int
	gate    chan struct{}
	entered chan struct{}
	fail    error
}

func (s *store) MarkerPeekMany(ctx context.Context, p *twicestore.MarkerPeekManyParams) (*twicestore.MarkerPeekManyResult, error) {
	s.mu.Lock()
	s.batches = append(s.batches, len(p.Markers))
	gate := s.gate
	s.gate = nil
	fail := s.fail
	s.mu.Unlock()
	if gate != nil {
		close(s.entered)
		<-gate
	}
	if fail != nil {
		return nil, fail
	}
	return s.Store.MarkerPeekMany(ctx, p)
}

func newStore(t testing.TB) *store {
	t.Helper()
	s, err := twicesqlite.Open(context.Background(), filepath.Join(t.TempDir(), "p.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &store{Store: s}
}

// peekAll peeks keys k0..k(n-1) at once and returns the answers by key.
func peekAll(t *testing.T, p *Peeker, n int) (map[string]bool, []error) {
	t.Helper()
	var (
		mu   sync.Mutex
		got  = map[string]bool{}
		errs []error
		wg   sync.WaitGroup
	)
	for i := range n {
		key := fmt.Sprint("k", i)
		wg.Go(func() {
			res, err := p.Peek(context.Background(), &twicestore.MarkerParams{Handler: "h", Key: key})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			got[key] = res.Processed
		})
	}
	wg.Wait()
	return got, errs
}

// TestAnswersLikePeek: every caller gets the answer MarkerPeek gives, and
// the peeks that arrive while a batch is in flight go in the next one.
func TestAnswersLikePeek(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	for i := 0; i < 50; i += 3 {
		if _, err := s.MarkerClaim(ctx, &twicestore.MarkerParams{Handler: "h", Key: fmt.Sprint("k", i)}); err != nil {
			t.Fatal(err)
		}
	}
	gate := make(chan struct{})
	s.gate, s.entered = gate, make(chan struct{})
	p := New(s)
	first := make(chan bool)
	go func() {
		res, err := p.Peek(ctx, &twicestore.MarkerParams{Handler: "h", Key: "k0"})
		if err != nil {
			t.Error(err)
		}
		first <- res.Processed
	}()
	<-s.entered // the first batch is in flight, held at the gate
	var (
		got  map[string]bool
		errs []error
		done = make(chan struct{})
	)
	go func() {
		got, errs = peekAll(t, p, 50)
		close(done)
	}()
	// The 50 wait behind the held batch; release it once they all queued.
	for {
		p.mu.Lock()
		n := len(p.pending)
		p.mu.Unlock()
		if n == 50 {
			break
		}
		waitABit()
	}
	close(gate)
	if !<-first {
		t.Error("k0 was claimed, yet its peek says not processed")
	}
	<-done
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for i := range 50 {
		key := fmt.Sprint("k", i)
		if want := i%3 == 0; got[key] != want {
			t.Errorf("peek %s: processed=%v, want %v", key, got[key], want)
		}
	}
	if fmt.Sprint(s.batches) != "[1 50]" {
		t.Errorf("batches %v, want [1 50]: the first peek alone, then the 50 that queued behind it", s.batches)
	}
}

// TestErrorReachesEveryCaller: a failed batch fails each of its peeks, and
// the lead passes on, so later peeks still run.
func TestErrorReachesEveryCaller(t *testing.T) {
	s := newStore(t)
	s.fail = errors.New("injected")
	p := New(s)
	got, errs := peekAll(t, p, 20)
	if len(errs) != 20 || len(got) != 0 {
		t.Fatalf("%d errors and %d answers, want 20 errors", len(errs), len(got))
	}
	s.fail = nil
	if _, errs := peekAll(t, p, 5); len(errs) > 0 {
		t.Fatalf("after the failure: %v", errs)
	}
}

// waitABit yields to the goroutines queueing their peeks.
func waitABit() {
	ch := make(chan struct{})
	go close(ch)
	<-ch
}

// BenchmarkPeek: 100 goroutines peek at once, as 100 ClaimAfter jobs
// starting together do: batched through the Peeker against one MarkerPeek
// round trip each. On PostgreSQL when TWICE_TEST_POSTGRES is set (where
// round trips cost), else on SQLite.
func BenchmarkPeek(b *testing.B) {
	var s interface {
		twicestore.Store
		twicestore.MarkerBatchPeeker
	}
	if os.Getenv(pgtest.EnvURL) != "" {
		u, _ := pgtest.Schema(b, "peeker_bench")
		pg, err := twicepg.Open(context.Background(), u)
		if err != nil {
			b.Fatal(err)
		}
		defer pg.Close()
		s = pg
	} else {
		s = newStore(b).Store
	}
	const callers = 100
	run := func(b *testing.B, peek func(ctx context.Context, m *twicestore.MarkerParams) (*twicestore.MarkerPeekResult, error)) {
		var wg sync.WaitGroup
		work := make(chan int)
		for range callers {
			wg.Go(func() {
				for i := range work {
					if _, err := peek(context.Background(), &twicestore.MarkerParams{Handler: "h", Key: fmt.Sprint("k", i)}); err != nil {
						b.Error(err)
					}
				}
			})
		}
		for i := 0; b.Loop(); i++ {
			work <- i
		}
		close(work)
		wg.Wait()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "peeks/s")
	}
	b.Run("batched", func(b *testing.B) { run(b, New(s).Peek) })
	b.Run("one-by-one", func(b *testing.B) { run(b, s.MarkerPeek) })
}
