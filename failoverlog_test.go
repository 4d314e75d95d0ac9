package twice_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// errReplyLost is what a client sees when the primary fails over after
// a commit reached the standby but before the reply came back.
var errReplyLost = errors.New("unexpected EOF (SQLSTATE 08006)")

// replyLostStore commits the first JobFinish, then holds its reply until
// release is closed and returns errReplyLost: a completion that committed
// though its write failed. It signals each lease extension that runs
// after that commit.
type replyLostStore struct {
	twicestore.Store
	once      sync.Once
	committed chan struct{} // closed after the commit
	release   chan struct{} // closed by the test to let the write fail
	extended  chan struct{} // one value per extension after the commit
}

func (s *replyLostStore) Unwrap() twicestore.Store { return s.Store }

func (s *replyLostStore) JobFinish(ctx context.Context, p *twicestore.JobFinishParams) (*twicestore.JobFinishResult, error) {
	first := false
	s.once.Do(func() { first = true })
	res, err := s.Store.JobFinish(ctx, p)
	if !first || err != nil {
		return res, err
	}
	close(s.committed)
	<-s.release
	return nil, errReplyLost
}

func (s *replyLostStore) JobExtendLease(ctx context.Context, p *twicestore.JobExtendLeaseParams) (*twicestore.JobExtendLeaseResult, error) {
	res, err := s.Store.JobExtendLease(ctx, p)
	select {
	case <-s.committed:
		select {
		case s.extended <- struct{}{}:
		default: // the test has seen enough of them
		}
	default:
	}
	return res, err
}

// falseAlarms are log lines that would be lies about a job whose
// completion committed.
var falseAlarms = []string{
	"lease lost", "job failed; will retry", "outcome discarded", "will run again", "another worker may hold",
}

// checkNoFalseAlarm fails the test if logs hold a line of falseAlarms.
func checkNoFalseAlarm(t *testing.T, logs string) {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		for _, lie := range falseAlarms {
			if strings.Contains(line, lie) {
				t.Errorf("logged %q about a completed job:\n%s", lie, line)
			}
		}
	}
}

// startLogged starts a client logging at debug level into logs, and
// returns a stop that drains it (outcomes written, their logs logged).
func startLogged(t *testing.T, store twicestore.Store, cfg twice.Config, logs *syncBuffer) func() {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := twice.NewClient(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), waitfor.Timeout)
			defer cancel()
			if err := c.Stop(ctx); err != nil {
				t.Errorf("stop: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestNoLeaseLostForPendingOutcome: a job whose completion committed
// while its write's reply was lost (a failover) is not reported as a
// lost lease by the heartbeats that run meanwhile, nor as failed or
// discarded once the write reports its error: it completed, once.
func TestNoLeaseLostForPendingOutcome(t *testing.T) {
	t.Parallel()
	store := &replyLostStore{Store: newStore(t), committed: make(chan struct{}),
		release: make(chan struct{}), extended: make(chan struct{}, 16)}
	var runs atomic.Int32
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[pingArgs](func(context.Context, *twice.Job[pingArgs]) error {
		runs.Add(1)
		return nil
	}), &twice.KindOpts{Strategy: twice.None})
	cfg := testConfig(reg)
	cfg.LeaseDuration = time.Second // a heartbeat every 333 ms
	var logs syncBuffer
	stop := startLogged(t, store, cfg, &logs)
	c, err := twice.NewClient(store, twice.Config{Registry: reg, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Enqueue(context.Background(), pingArgs{N: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitfor.Closed(t, store.committed, "the completion to commit")
	// Two heartbeats after the commit: the first one's verdict is logged
	// before the second runs.
	waitfor.Recv(t, store.extended, "a heartbeat after the commit")
	waitfor.Recv(t, store.extended, "a second heartbeat after the commit")
	close(store.release)
	stop()

	row := waitJob(t, store, res.Job.ID, "completed", isState(twicetype.JobStateCompleted))
	if row.Attempt != 1 || runs.Load() != 1 {
		t.Errorf("attempt %d, %d runs; want one", row.Attempt, runs.Load())
	}
	checkNoFalseAlarm(t, logs.String())
}

// commitLostStore's transactions commit, then report the failover's
// error, as a commit that reached the standby before the primary died.
type commitLostStore struct{ twicestore.Store }

func (s *commitLostStore) Unwrap() twicestore.Store { return s.Store }

func (s *commitLostStore) Begin(ctx context.Context) (twicestore.Tx, error) {
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &commitLostTx{tx}, nil
}

type commitLostTx struct{ twicestore.Tx }

func (tx *commitLostTx) Commit(ctx context.Context) error {
	if err := tx.Tx.Commit(ctx); err != nil {
		return err
	}
	return errReplyLost
}

// TestTransactionalCommitLostIsNoFailure: a Transactional job whose
// commit (effect and completion together) reached the database though
// Commit returned an error is not logged as failed and retried: it
// completed, once.
func TestTransactionalCommitLostIsNoFailure(t *testing.T) {
	t.Parallel()
	inner := newStore(t)
	setupLedger(t, inner)
	store := &commitLostStore{inner}
	reg := twice.NewRegistry()
	twice.MustRegister(reg, creditHandler(nil), &twice.KindOpts{Strategy: twice.Transactional})
	var logs syncBuffer
	stop := startLogged(t, store, testConfig(reg), &logs)
	c, err := twice.NewClient(store, twice.Config{Registry: reg, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Enqueue(context.Background(), creditArgs{CreditID: 1, Cents: 100}, nil)
	if err != nil {
		t.Fatal(err)
	}
	row := waitJob(t, store, res.Job.ID, "completed", isState(twicetype.JobStateCompleted))
	stop()
	if row.Attempt != 1 {
		t.Errorf("attempt %d; want one", row.Attempt)
	}
	if n := queryInt(t, inner, `SELECT count(*) FROM ledger`); n != 1 {
		t.Errorf("ledger rows = %d, want 1", n)
	}
	checkNoFalseAlarm(t, logs.String())
}

// TestLeaseLostSaysWhatTheRowSays: a lease that really was lost (the job
// rescued while its handler ran) is still warned about, with the state
// and epoch the job's row is in now.
func TestLeaseLostSaysWhatTheRowSays(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	started := make(chan struct{}, 1)
	causes := make(chan error, 1)
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[pingArgs](func(ctx context.Context, job *twice.Job[pingArgs]) error {
		if job.Attempt > 1 {
			return nil // the rescued job, run again
		}
		started <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	}), &twice.KindOpts{Strategy: twice.None})
	cfg := testConfig(reg)
	cfg.LeaseDuration = time.Second
	var logs syncBuffer
	stop := startLogged(t, store, cfg, &logs)
	c, err := twice.NewClient(store, twice.Config{Registry: reg, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(context.Background(), pingArgs{N: 1}, nil); err != nil {
		t.Fatal(err)
	}
	waitfor.Recv(t, started, "the handler to start")
	if _, err := store.JobRescue(context.Background(), &twicestore.JobRescueParams{Now: time.Now().Add(time.Hour), Limit: 10}); err != nil {
		t.Fatal(err)
	}
	if cause := waitfor.Recv(t, causes, "the handler to be cancelled"); !errors.Is(cause, twice.ErrLeaseLost) {
		t.Fatalf("cause = %v, want ErrLeaseLost", cause)
	}
	stop()
	if l := logs.String(); !strings.Contains(l, `msg="job lease lost; cancelling its handler"`) || !strings.Contains(l, "epoch_now=") {
		t.Errorf("logs say no lost lease with the job's state now:\n%s", l)
	}
}
