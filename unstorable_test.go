package twice_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

type badTextArgs struct{ Mode string }

func (badTextArgs) Kind() string { return "test.badtext.v1" }

// TestUnstorableTextIsCleaned: every outcome text a handler controls (its
// error, a NoOp or Cancel reason, a panic value) may hold a NUL byte or
// bytes that are not UTF-8; the job still reaches its final state on both
// drivers, with the text stored cleaned (each bad byte shown as \xNN, and
// marked). Output the handler chose is refused at RecordOutput instead.
// Before, PostgreSQL refused each such outcome (SQLSTATE 22P05 / 22021) on
// every try and the job stayed running for ever.
func TestUnstorableTextIsCleaned(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mode   string
		handle func(ctx context.Context) error
		state  twicetype.JobState
		// text is what the stored error (or, when empty, note) contains.
		errText, note string
	}{
		{"error with NUL", func(context.Context) error { return errors.New("provider said: \x00\x01bin") },
			twicetype.JobStateDead, `provider said: \x00` + "\x01bin", ""},
		{"NoOp reason with NUL", func(context.Context) error { return twice.NoOp("gone\x00") },
			twicetype.JobStateCompleted, "", `gone\x00`},
		{"NoOp reason not UTF-8", func(context.Context) error { return twice.NoOp("gone \xff\xfe") },
			twicetype.JobStateCompleted, "", `gone \xff\xfe`},
		{"Cancel reason with NUL", func(context.Context) error { return twice.Cancel(errors.New("withdrawn\x00")) },
			twicetype.JobStateCancelled, "", `withdrawn\x00`},
		{"Cancel reason not UTF-8", func(context.Context) error { return twice.Cancel(errors.New("withdrawn \xc3")) },
			twicetype.JobStateCancelled, "", `withdrawn \xc3`},
		{"panic value with NUL", func(context.Context) error { panic("bad\x00value") },
			twicetype.JobStateDead, `panic: bad\x00value`, ""},
	}
	for name, open := range stepStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := open(t)
			handlers := map[string]func(ctx context.Context) error{}
			for _, tt := range tests {
				handlers[tt.mode] = tt.handle
			}
			recorded := make(chan error, 1)
			handlers["RecordOutput not UTF-8"] = func(ctx context.Context) error {
				err := twice.RecordOutput(ctx, json.RawMessage("\"caf\xe9\""))
				recorded <- err
				return err
			}
			reg := twice.NewRegistry()
			twice.MustRegister(reg, twice.HandlerFunc[badTextArgs](func(ctx context.Context, j *twice.Job[badTextArgs]) error {
				return handlers[j.Args.Mode](ctx)
			}), &twice.KindOpts{Strategy: twice.None})
			c := startClient(t, store, testConfig(reg))
			enqueue := func(mode string) int64 {
				res, err := c.Enqueue(context.Background(), badTextArgs{Mode: mode}, &twice.EnqueueOpts{MaxAttempts: 1})
				if err != nil {
					t.Fatal(err)
				}
				return res.Job.ID
			}
			for _, tt := range tests {
				row := waitJob(t, store, enqueue(tt.mode), string(tt.state)+" ("+tt.mode+")", isState(tt.state))
				got := row.Note
				if tt.errText != "" {
					if len(row.Errors) != 1 {
						t.Fatalf("%s: errors %v, want one", tt.mode, row.Errors)
					}
					got = row.Errors[0].Error
				}
				want := tt.errText + tt.note
				if !strings.Contains(got, want) || !strings.Contains(got, "[cleaned: ") {
					t.Errorf("%s: stored %q, want it to hold %q and the cleaned mark", tt.mode, got, want)
				}
			}
			row := waitJob(t, store, enqueue("RecordOutput not UTF-8"), "dead", isState(twicetype.JobStateDead))
			if err := <-recorded; !errors.Is(err, twice.ErrInvalidInput) || !strings.Contains(err.Error(), "UTF-8") {
				t.Errorf("RecordOutput of bytes not UTF-8: %v, want ErrInvalidInput naming UTF-8", err)
			}
			if len(row.Errors) != 1 || !strings.Contains(row.Errors[0].Error, "not valid UTF-8") {
				t.Errorf("errors %v, want RecordOutput's refusal", row.Errors)
			}
		})
	}
}

// refusingStore is the real store whose JobFinish refuses, as
// unstorable, every write holding an outcome whose error says "poison",
// as PostgreSQL refuses a value it can never hold on every try.
type refusingStore struct {
	twicestore.Store
	refused atomic.Int32
}

func (s *refusingStore) Unwrap() twicestore.Store { return s.Store }

func (s *refusingStore) JobFinish(ctx context.Context, p *twicestore.JobFinishParams) (*twicestore.JobFinishResult, error) {
	for _, o := range p.Outcomes {
		if o.Error != nil && strings.Contains(o.Error.Error, "poison") {
			s.refused.Add(1)
			return nil, twicestore.Unstorable(errors.New("injected: ERROR: invalid byte sequence (SQLSTATE 22021)"))
		}
	}
	return s.Store.JobFinish(ctx, p)
}

// TestOneUnstorableOutcomeHoldsUpNoOther: a worker whose store refuses one
// job's outcome for ever still writes the outcomes of 50 other jobs, and
// the refused job ends dead-lettered, its error saying its outcome could
// not be stored, with OnDead told; its lease is not extended for ever.
// Before, the completer retried the refused write while the heartbeat
// kept extending the lease, and every outcome behind it waited (50 of 50
// jobs still running after 40 s in the report).
func TestOneUnstorableOutcomeHoldsUpNoOther(t *testing.T) {
	t.Parallel()
	for name, open := range stepStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := &refusingStore{Store: open(t)}
			reg := twice.NewRegistry()
			twice.MustRegister(reg, twice.HandlerFunc[badTextArgs](func(_ context.Context, j *twice.Job[badTextArgs]) error {
				if j.Args.Mode == "poison" {
					return errors.New("poison")
				}
				return nil
			}), &twice.KindOpts{Strategy: twice.None})
			dead := make(chan twice.DeadJob, 1)
			cfg := testConfig(reg)
			cfg.OnDead = func(_ context.Context, d twice.DeadJob) { dead <- d }
			c := startClient(t, store, cfg)
			ctx := context.Background()
			bad, err := c.Enqueue(ctx, badTextArgs{Mode: "poison"}, &twice.EnqueueOpts{MaxAttempts: 1})
			if err != nil {
				t.Fatal(err)
			}
			ids := make([]int64, 50)
			for i := range ids {
				res, err := c.Enqueue(ctx, badTextArgs{Mode: "plain"}, &twice.EnqueueOpts{MaxAttempts: 1})
				if err != nil {
					t.Fatal(err)
				}
				ids[i] = res.Job.ID
			}
			for _, id := range ids {
				waitJob(t, store, id, "completed", isState(twicetype.JobStateCompleted))
			}
			row := waitJob(t, store, bad.Job.ID, "dead", isState(twicetype.JobStateDead))
			if len(row.Errors) != 1 || !strings.Contains(row.Errors[0].Error, "could not be stored") {
				t.Errorf("refused job's errors %v, want its outcome's refusal explained", row.Errors)
			}
			if d := waitfor.Recv(t, dead, "OnDead for the refused job"); d.Job.ID != bad.Job.ID {
				t.Errorf("OnDead for job %d, want %d", d.Job.ID, bad.Job.ID)
			}
			if n := store.refused.Load(); n < 1 {
				t.Errorf("the store refused %d writes, want the poisoned outcome refused", n)
			}
		})
	}
}
