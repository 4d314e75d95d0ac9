package twice_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/pgtest"
	"github.com/twicejobs/twice/twicepg"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// stepStores opens a fresh store per driver: SQLite always, PostgreSQL
// when TWICE_TEST_POSTGRES is set.
func stepStores(_ *testing.T) map[string]func(t *testing.T) twicestore.Store {
	stores := map[string]func(t *testing.T) twicestore.Store{
		"sqlite": func(t *testing.T) twicestore.Store { return newStore(t) },
	}
	if os.Getenv(pgtest.EnvURL) != "" {
		stores["postgres"] = func(t *testing.T) twicestore.Store {
			u, _ := pgtest.Schema(t, "steps")
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

// execStepTx runs one statement without arguments in a driver's transaction
// (a *sql.Tx or a pgx.Tx).
func execStepTx(ctx context.Context, tx any, stmt string) error {
	switch tx := tx.(type) {
	case *sql.Tx:
		_, err := tx.ExecContext(ctx, stmt)
		return err
	case pgx.Tx:
		_, err := tx.Exec(ctx, stmt)
		return err
	}
	return fmt.Errorf("no transaction (%T)", tx)
}

// countRows counts with a query that returns one integer.
func countRows(t testing.TB, store twicestore.Store, q string) int {
	t.Helper()
	ctx := context.Background()
	tx, err := store.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var n int
	switch d := tx.Unwrap().(type) {
	case *sql.Tx:
		err = d.QueryRowContext(ctx, q).Scan(&n)
	case pgx.Tx:
		err = d.QueryRow(ctx, q).Scan(&n)
	}
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func setupStepLedger(t testing.TB, store twicestore.Store) {
	t.Helper()
	ctx := context.Background()
	tx, err := store.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := execStepTx(ctx, tx.Unwrap(), `CREATE TABLE order_ledger (order_id TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

type orderArgs struct {
	OrderID string `json:"order_id"`
}

func (orderArgs) Kind() string             { return "order.place.v1" }
func (a orderArgs) IdempotencyKey() string { return "order-" + a.OrderID }

// provider stands for a payment provider and a mailer outside the
// database: it counts the charges and emails it was asked for.
type provider struct {
	mu       sync.Mutex
	charges  []string // charge ids, one per charge made
	emails   int
	receipts []string // the charge receipt each delivery's step returned
	keys     map[string]bool
}

func (p *provider) charge(key string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.keys == nil {
		p.keys = map[string]bool{}
	}
	p.keys[key] = true
	id := fmt.Sprintf("ch_%d", len(p.charges)+1)
	p.charges = append(p.charges, id)
	return id
}

type chargeReceipt struct {
	ChargeID string `json:"charge_id"`
}

// placeOrder is the stepped handler of the proof: charge (ClaimBefore),
// a ledger row (Transactional), an email (ClaimAfter), and the charge id
// as the job's output.
func placeOrder(p *provider) twice.HandlerFunc[orderArgs] {
	return func(ctx context.Context, job *twice.Job[orderArgs]) error {
		charge, err := twice.Step(ctx, "charge", twice.ClaimBefore, func(ctx context.Context) (chargeReceipt, error) {
			return chargeReceipt{ChargeID: p.charge(twice.EffectKey(ctx, "charge"))}, nil
		})
		if err != nil {
			return err
		}
		p.mu.Lock()
		p.receipts = append(p.receipts, charge.ChargeID)
		p.mu.Unlock()
		if _, err := twice.Step(ctx, "ledger", twice.Transactional, func(ctx context.Context) (int, error) {
			return 1, execStepTx(ctx, twice.StepTx(ctx), fmt.Sprintf(`INSERT INTO order_ledger VALUES ('%s')`, job.Args.OrderID))
		}); err != nil {
			return err
		}
		if _, err := twice.Step(ctx, "email", twice.ClaimAfter, func(context.Context) (string, error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.emails++
			return "sent", nil
		}); err != nil {
			return err
		}
		return twice.RecordOutput(ctx, charge)
	}
}

// errCrash is what an injected crash makes the crashing store call return.
var errCrash = errors.New("injected crash")

// boundary names a store call of the stepped handler where a crash
// strikes, and whether the call's write happened before the crash.
type boundary struct {
	name  string
	call  string // "claim", "complete", "commit" or "finish"
	step  string // the step whose call it is ("" for finish)
	after bool   // the write happened, then the process died
}

// crashStore is the real store with one crash armed: at the boundary's
// call of the first delivery, the call fails (after its write, when
// after is set), and that delivery's outcome is dropped, as a dead
// process's is; its lease is then expired at once, so the job is
// delivered again under a new epoch.
type crashStore struct {
	twicestore.Store
	b boundary

	mu      sync.Mutex
	fired   bool
	crashed map[int64]bool // jobs whose current delivery crashed
}

func (s *crashStore) Unwrap() twicestore.Store { return s.Store }

// strike reports whether the armed crash fires at this call.
func (s *crashStore) strike(call, step string, jobID int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fired || s.b.call != call || s.b.step != step {
		return false
	}
	s.fired = true
	s.crashed[jobID] = true
	return true
}

func (s *crashStore) StepClaim(ctx context.Context, p *twicestore.StepParams) (*twicestore.StepClaimResult, error) {
	if !s.strike("claim", p.Step, p.JobID) {
		return s.Store.StepClaim(ctx, p)
	}
	if s.b.after {
		if _, err := s.Store.StepClaim(ctx, p); err != nil {
			return nil, err
		}
	}
	return nil, errCrash
}

func (s *crashStore) StepComplete(ctx context.Context, p *twicestore.StepParams) error {
	if !s.strike("complete", p.Step, p.JobID) {
		return s.Store.StepComplete(ctx, p)
	}
	if s.b.after {
		if err := s.Store.StepComplete(ctx, p); err != nil {
			return err
		}
	}
	return errCrash
}

func (s *crashStore) Begin(ctx context.Context) (twicestore.Tx, error) {
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &crashTx{Tx: tx, s: s}, nil
}

// JobFinish drops the outcome of a delivery that crashed and expires its
// lease, so the job is rescued and leased again.
func (s *crashStore) JobFinish(ctx context.Context, p *twicestore.JobFinishParams) (*twicestore.JobFinishResult, error) {
	res := &twicestore.JobFinishResult{Applied: make([]bool, len(p.Outcomes))}
	for i, o := range p.Outcomes {
		s.mu.Lock()
		crashed := s.crashed[o.ID]
		delete(s.crashed, o.ID)
		s.mu.Unlock()
		if !crashed && s.strike("finish", "", o.ID) {
			crashed = true
			s.mu.Lock()
			delete(s.crashed, o.ID)
			s.mu.Unlock()
		}
		if crashed {
			if _, err := s.JobRescue(ctx, &twicestore.JobRescueParams{Now: time.Now().Add(24 * time.Hour)}); err != nil {
				return nil, err
			}
			continue
		}
		one, err := s.Store.JobFinish(ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{o}})
		if err != nil {
			return nil, err
		}
		res.Applied[i] = one.Applied[0]
	}
	return res, nil
}

// crashTx is a step's transaction, whose commit a crash can strike.
type crashTx struct {
	twicestore.Tx
	s     *crashStore
	step  string
	jobID int64
}

func (t *crashTx) StepClaim(ctx context.Context, p *twicestore.StepParams) (*twicestore.StepClaimResult, error) {
	t.step, t.jobID = p.Step, p.JobID
	if t.s.strike("claim", p.Step, p.JobID) {
		return nil, errCrash // before the claim: the transaction is rolled back
	}
	return t.Tx.StepClaim(ctx, p)
}

func (t *crashTx) Commit(ctx context.Context) error {
	if t.step == "" || !t.s.strike("commit", t.step, t.jobID) {
		return t.Tx.Commit(ctx)
	}
	if t.s.b.after {
		if err := t.Tx.Commit(ctx); err != nil {
			return err
		}
	} else {
		_ = t.Rollback(ctx)
	}
	return errCrash
}

// TestStepsCrashAtEveryBoundary is the proof of named steps: a 3-step job
// (ClaimBefore charge, Transactional ledger row, ClaimAfter email) is
// killed at every step boundary of its first delivery and delivered again
// under a new epoch. Every time: exactly one charge or a dead letter for a
// human (the charge's claim unfinished), exactly one ledger row when the
// job completes, at least one email, and every delivery after the charge
// got the same charge id back from its receipt. A dead letter is settled
// as a person would (StepSettle with the provider's answer) and retried:
// it then completes with one charge.
func TestStepsCrashAtEveryBoundary(t *testing.T) {
	t.Parallel()
	boundaries := []struct {
		boundary
		dead bool // the charge may have happened: a human decides
	}{
		{boundary: boundary{"before the charge's claim", "claim", "charge", false}},
		{boundary: boundary{"between the charge's claim and its effect", "claim", "charge", true}, dead: true},
		{boundary: boundary{"between the charge and its receipt", "complete", "charge", false}, dead: true},
		{boundary: boundary{"after the charge's receipt", "complete", "charge", true}},
		{boundary: boundary{"before the ledger's claim", "claim", "ledger", false}},
		{boundary: boundary{"before the ledger's commit", "commit", "ledger", false}},
		{boundary: boundary{"after the ledger's commit", "commit", "ledger", true}},
		{boundary: boundary{"between the email and its claim", "claim", "email", false}},
		{boundary: boundary{"after the email's claim", "claim", "email", true}},
		{boundary: boundary{"between the handler and the job's completion", "finish", "", false}},
	}
	for driver, open := range stepStores(t) {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			for _, bc := range boundaries {
				t.Run(bc.name, func(t *testing.T) {
					t.Parallel()
					real := open(t)
					setupStepLedger(t, real)
					store := &crashStore{Store: real, b: bc.boundary, crashed: map[int64]bool{}}
					p := &provider{}
					reg := twice.NewRegistry()
					twice.MustRegister(reg, placeOrder(p), &twice.KindOpts{Strategy: twice.None, MaxAttempts: 5})
					client := startClient(t, store, testConfig(reg))
					res, err := client.Enqueue(context.Background(), orderArgs{OrderID: "o-1"}, nil)
					if err != nil {
						t.Fatal(err)
					}
					row := waitJob(t, real, res.Job.ID, "finished", func(r *twicetype.JobRow) bool { return r.State.Finished() })
					if !store.fired {
						t.Fatal("the crash never fired")
					}
					p.mu.Lock()
					charges, emails, receipts := p.charges, p.emails, p.receipts
					p.mu.Unlock()
					ledger := countRows(t, real, `SELECT count(*) FROM order_ledger`)
					t.Logf("job %s after %d attempts: charges %v, ledger rows %d, emails %d, receipts %v",
						row.State, row.Attempt, charges, ledger, emails, receipts)
					if bc.dead {
						if row.State != twicetype.JobStateDead {
							t.Fatalf("job %s, want dead: the charge may have happened", row.State)
						}
						if last := row.Errors[len(row.Errors)-1].Error; !strings.Contains(last, "never finished") {
							t.Errorf("dead letter's error = %q, want the unfinished charge named", last)
						}
						if len(charges) > 1 || ledger != 0 || emails != 0 {
							t.Fatalf("dead letter after charges %v, ledger %d, emails %d; want at most one charge and nothing after it",
								charges, ledger, emails)
						}
						// The person asks the provider, settles the charge
						// step with what it says, and retries the job.
						var receipt any // nil: the charge did not happen
						if len(charges) == 1 {
							receipt = chargeReceipt{ChargeID: charges[0]}
						}
						if err := client.StepSettle(context.Background(), res.Job.ID, "charge", receipt); err != nil {
							t.Fatal(err)
						}
						if _, err := client.JobRetry(context.Background(), &twice.JobActionParams{IDs: []int64{res.Job.ID}}); err != nil {
							t.Fatal(err)
						}
						row = waitJob(t, real, res.Job.ID, "finished again", func(r *twicetype.JobRow) bool { return r.State.Finished() })
						p.mu.Lock()
						charges, emails, receipts = p.charges, p.emails, p.receipts
						p.mu.Unlock()
						ledger = countRows(t, real, `SELECT count(*) FROM order_ledger`)
					}
					if row.State != twicetype.JobStateCompleted {
						t.Fatalf("job %s, want completed; errors %v", row.State, row.Errors)
					}
					if len(charges) != 1 || ledger != 1 || emails < 1 {
						t.Fatalf("charges %v, ledger rows %d, emails %d; want exactly one charge, one ledger row, at least one email",
							charges, ledger, emails)
					}
					for _, r := range receipts {
						if r != charges[0] {
							t.Errorf("a delivery got charge %q from the step, want %q (the receipt)", r, charges[0])
						}
					}
					out, err := client.JobResult(context.Background(), res.Job.ID)
					var got chargeReceipt
					if err != nil || out.Decode(&got) != nil || got.ChargeID != charges[0] {
						t.Errorf("job result = %+v, %v; want output with charge %s", out, err, charges[0])
					}
				})
			}
		})
	}
}

// TestStepsConvergeUnderRedelivery: with every job delivered twice
// (Config.Redeliver: at once or in a row), a stepped handler charges each
// order once, writes one ledger row per order, emails at least once, and
// the second delivery of a completed job gets every receipt back instead
// of failing.
func TestStepsConvergeUnderRedelivery(t *testing.T) {
	t.Parallel()
	for driver, open := range stepStores(t) {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			store := open(t)
			setupStepLedger(t, store)
			p := &provider{}
			reg := twice.NewRegistry()
			twice.MustRegister(reg, placeOrder(p), &twice.KindOpts{Strategy: twice.None, MaxAttempts: 10})
			cfg := testConfig(reg)
			cfg.Redeliver = true
			var logs syncBuffer
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			client := startClient(t, store, cfg)
			const orders = 20
			ids := make([]int64, orders)
			for i := range orders {
				res, err := client.Enqueue(context.Background(), orderArgs{OrderID: fmt.Sprintf("o-%d", i)}, nil)
				if err != nil {
					t.Fatal(err)
				}
				ids[i] = res.Job.ID
			}
			for _, id := range ids {
				waitJob(t, store, id, "completed", isState(twicetype.JobStateCompleted))
			}
			if err := client.Stop(context.Background()); err != nil { // the second deliveries in a row are done
				t.Fatal(err)
			}
			p.mu.Lock()
			charges, emails := len(p.charges), p.emails
			p.mu.Unlock()
			if ledger := countRows(t, store, `SELECT count(*) FROM order_ledger`); charges != orders || ledger != orders || emails < orders {
				t.Fatalf("%d orders: %d charges, %d ledger rows, %d emails; want one charge and one row per order, an email at least",
					orders, charges, ledger, emails)
			}
			if strings.Contains(logs.String(), "does not converge") {
				t.Fatalf("a second delivery failed:\n%s", logs.String())
			}
		})
	}
}

// TestStepInTransactionalKind: a Transactional kind's step runs in the
// job's own transaction: it commits with the job's completion, and a
// failure after it rolls the step back with everything else, so the retry
// runs it again.
func TestStepInTransactionalKind(t *testing.T) {
	t.Parallel()
	for driver, open := range stepStores(t) {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			store := open(t)
			setupStepLedger(t, store)
			var runs atomic.Int32
			reg := twice.NewRegistry()
			twice.MustRegister(reg, twice.HandlerFunc[orderArgs](func(ctx context.Context, job *twice.Job[orderArgs]) error {
				if _, err := twice.Step(ctx, "ledger", twice.Transactional, func(ctx context.Context) (int, error) {
					if twice.StepTx(ctx) != job.Tx() {
						return 0, errors.New("the step's transaction is not the job's")
					}
					return 1, execStepTx(ctx, twice.StepTx(ctx), `INSERT INTO order_ledger VALUES ('o-1')`)
				}); err != nil {
					return err
				}
				if runs.Add(1) == 1 {
					return errors.New("fail after the step: roll it back")
				}
				return nil
			}), &twice.KindOpts{Strategy: twice.Transactional, MaxAttempts: 3})
			client := startClient(t, store, testConfig(reg))
			res, err := client.Enqueue(context.Background(), orderArgs{OrderID: "o-1"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			row := waitJob(t, store, res.Job.ID, "completed", isState(twicetype.JobStateCompleted))
			if n := countRows(t, store, `SELECT count(*) FROM order_ledger`); n != 1 || runs.Load() != 2 || row.Attempt != 2 {
				t.Fatalf("ledger rows %d after %d runs in %d attempts; want 1 row, the step run again after the rollback",
					n, runs.Load(), row.Attempt)
			}
		})
	}
}
