package twice_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

type refundArgs struct {
	RefundID string `json:"refund_id"`
}

func (refundArgs) Kind() string { return "wait.refund.v1" }

type approval struct {
	Approved bool   `json:"approved"`
	By       string `json:"by"`
}

// refundHandler reserves the refund (a step), waits for an approval, and
// records who approved it; reserves counts the step's runs and runs the
// handler's.
func refundHandler(reserves, runs *atomic.Int32, timeout time.Duration) twice.HandlerFunc[refundArgs] {
	return func(ctx context.Context, job *twice.Job[refundArgs]) error {
		runs.Add(1)
		if _, err := twice.Step(ctx, "reserve", twice.ClaimAfter, func(context.Context) (string, error) {
			reserves.Add(1)
			return "rsv_" + job.Args.RefundID, nil
		}); err != nil {
			return err
		}
		a, err := twice.AwaitSignal[approval](ctx, "approve", timeout)
		switch {
		case errors.Is(err, twice.ErrWaitTimedOut):
			return twice.RecordOutput(ctx, "timed out")
		case err != nil:
			return err
		}
		return twice.RecordOutput(ctx, a.By)
	}
}

// TestAwaitSignalResumes: a job that awaits a signal parks, holding no
// lease, with its finished step kept; the signal wakes it, the step is not
// run again, the await returns the payload; a second signal is a
// duplicate, and one for the finished job is refused.
func TestAwaitSignalResumes(t *testing.T) {
	for name, open := range stepStores(t) {
		t.Run(name, func(t *testing.T) {
			store := open(t)
			reg := twice.NewRegistry()
			var reserves, runs atomic.Int32
			if err := twice.Register(reg, refundHandler(&reserves, &runs, twice.NoTimeout), nil); err != nil {
				t.Fatal(err)
			}
			c := startClient(t, store, testConfig(reg))
			ctx := t.Context()
			res, err := c.Enqueue(ctx, refundArgs{RefundID: "r1"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			id := res.Job.ID
			row := waitJob(t, store, id, "waiting", isState(twicetype.JobStateWaiting))
			if row.WaitName != "approve" || row.Attempt != 0 || !row.LeaseUntil.IsZero() {
				t.Fatalf("parked job: wait %q attempt %d lease %v; want approve, 0, none", row.WaitName, row.Attempt, row.LeaseUntil)
			}
			sent, err := c.Signal(ctx, &twice.SignalParams{JobID: id, Name: "approve", Payload: approval{Approved: true, By: "ann"}, By: "ann@ops"})
			if err != nil || !sent.Woke || sent.Duplicate {
				t.Fatalf("Signal = %+v, %v; want woke", sent, err)
			}
			again, err := c.Signal(ctx, &twice.SignalParams{JobID: id, Name: "approve", Payload: approval{By: "bob"}})
			if err != nil || !again.Duplicate || again.Woke || !strings.Contains(string(again.Existing.Payload), "ann") {
				t.Fatalf("second Signal = %+v, %v; want a duplicate that names the first", again, err)
			}
			out, err := c.Wait(ctx, id)
			if err != nil || out.State != twicetype.JobStateCompleted {
				t.Fatalf("Wait = %+v, %v", out, err)
			}
			var by string
			if err := out.Decode(&by); err != nil || by != "ann" {
				t.Fatalf("output = %q, %v; want the first signal's ann", by, err)
			}
			if reserves.Load() != 1 || runs.Load() != 2 {
				t.Fatalf("the step ran %d times and the handler %d; want 1 and 2", reserves.Load(), runs.Load())
			}
			late, err := c.Signal(ctx, &twice.SignalParams{JobID: id, Name: "approve", Payload: approval{By: "late"}})
			if err != nil || !late.Duplicate {
				t.Fatalf("a repeat to the completed job = %+v, %v; want a duplicate", late, err)
			}
			_, err = c.Signal(ctx, &twice.SignalParams{JobID: id, Name: "cancel-it", Payload: approval{By: "late"}})
			if !errors.Is(err, twice.ErrJobFinished) {
				t.Fatalf("a new signal to a completed job = %v, want ErrJobFinished", err)
			}
		})
	}
}

// TestSignalBeforeAwaitAndTimeout: a signal sent before the handler
// awaits is not lost, and a wait whose timeout passes resolves as
// ErrWaitTimedOut, through the worker's timers.
func TestSignalBeforeAwaitAndTimeout(t *testing.T) {
	store := newStore(t)
	reg := twice.NewRegistry()
	var reserves, runs atomic.Int32
	if err := twice.Register(reg, refundHandler(&reserves, &runs, 300*time.Millisecond), nil); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	// Enqueued and signalled before any worker runs.
	c, err := twice.NewClient(store, testConfig(reg))
	if err != nil {
		t.Fatal(err)
	}
	early, err := c.Enqueue(ctx, refundArgs{RefundID: "early"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.Signal(ctx, &twice.SignalParams{JobID: early.Job.ID, Name: "approve", Payload: approval{By: "early"}}); err != nil || r.Woke {
		t.Fatalf("Signal before the await = %+v, %v; want stored, nothing woken", r, err)
	}
	late, err := c.Enqueue(ctx, refundArgs{RefundID: "late"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := startClient(t, store, testConfig(reg))
	for id, want := range map[int64]string{early.Job.ID: "early", late.Job.ID: "timed out"} {
		out, err := w.Wait(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		if err := out.Decode(&got); err != nil || got != want {
			t.Fatalf("job %d output %q, %v; want %q", id, got, err, want)
		}
	}
	r, err := w.Signal(ctx, &twice.SignalParams{JobID: late.Job.ID, Name: "approve"})
	if err != nil || !r.Duplicate || !r.Existing.TimedOut {
		t.Fatalf("a signal after the timeout = %+v, %v; want a duplicate of the timeout", r, err)
	}
}

// TestSignalBadInput: every signal that cannot be right is refused with
// a usage error, and stores nothing.
func TestSignalBadInput(t *testing.T) {
	store := newStore(t)
	reg := twice.NewRegistry()
	var reserves, runs atomic.Int32
	if err := twice.Register(reg, refundHandler(&reserves, &runs, twice.NoTimeout), nil); err != nil {
		t.Fatal(err)
	}
	c, err := twice.NewClient(store, testConfig(reg))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	res, err := c.Enqueue(ctx, refundArgs{RefundID: "r"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := res.Job.ID
	for _, tc := range []struct {
		name string
		p    *twice.SignalParams
		want error
		says string
	}{
		{"no job id", &twice.SignalParams{Name: "approve"}, twice.ErrInvalidInput, "id of the job"},
		{"unknown job", &twice.SignalParams{JobID: id + 100, Name: "approve"}, twice.ErrJobNotFound, "job not found"},
		{"no name", &twice.SignalParams{JobID: id}, twice.ErrInvalidInput, "needs a name"},
		{"NUL in name", &twice.SignalParams{JobID: id, Name: "app\x00rove"}, twice.ErrInvalidInput, "NUL"},
		{"not UTF-8", &twice.SignalParams{JobID: id, Name: "app\xffrove"}, twice.ErrInvalidInput, "UTF-8"},
		{"long name", &twice.SignalParams{JobID: id, Name: strings.Repeat("a", 200)}, twice.ErrInvalidInput, "limit"},
		{"secret", &twice.SignalParams{JobID: id, Name: "approve", Payload: map[string]string{"api_token": "x"}}, twice.ErrInvalidInput, "plaintext"},
		{"too large", &twice.SignalParams{JobID: id, Name: "approve", Payload: strings.Repeat("x", 3000)}, twice.ErrInvalidInput, "over the"},
		{"not JSON", &twice.SignalParams{JobID: id, Name: "approve", Payload: func() {}}, twice.ErrInvalidInput, "JSON"},
	} {
		_, err := c.Signal(ctx, tc.p)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: Signal = %v, want %v saying %q", tc.name, err, tc.want, tc.says)
		}
	}
	if _, err := store.JobSignalGet(ctx, &twicestore.JobSignalGetParams{JobID: id, Name: "approve"}); !errors.Is(err, twicestore.ErrNotFound) {
		t.Fatalf("a refused signal was stored: %v", err)
	}
}

type badWaitArgs struct{}

func (badWaitArgs) Kind() string { return "wait.bad.v1" }

// TestAwaitBadTimeout: a wait with no positive timeout fails the job at
// once, saying what to pass.
func TestAwaitBadTimeout(t *testing.T) {
	store := newStore(t)
	reg := twice.NewRegistry()
	if err := twice.Register(reg, twice.HandlerFunc[badWaitArgs](func(ctx context.Context, _ *twice.Job[badWaitArgs]) error {
		_, err := twice.AwaitSignal[string](ctx, "answer", 0)
		return err
	}), nil); err != nil {
		t.Fatal(err)
	}
	c := startClient(t, store, testConfig(reg))
	res, err := c.Enqueue(t.Context(), badWaitArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	row := waitJob(t, store, res.Job.ID, "dead", isState(twicetype.JobStateDead))
	if len(row.Errors) != 1 || !strings.Contains(row.Errors[0].Error, "NoTimeout") {
		t.Fatalf("errors = %+v, want one naming twice.NoTimeout", row.Errors)
	}
}

type reviewTask struct{ Step string }

func (reviewTask) Kind() string { return "wait.review-task.v1" }

// TestWorkflowTaskWaits: a workflow task that awaits a signal parks like
// any job; its dependant does not start until the signal resumed it and
// it completed, and the workflow counts it as unfinished meanwhile.
func TestWorkflowTaskWaits(t *testing.T) {
	for name, open := range stepStores(t) {
		t.Run(name, func(t *testing.T) {
			store := open(t)
			reg := twice.NewRegistry()
			ran := make(chan string, 4)
			twice.MustRegister(reg, twice.HandlerFunc[reviewTask](func(ctx context.Context, job *twice.Job[reviewTask]) error {
				if job.Args.Step == "review" {
					if _, err := twice.AwaitSignal[bool](ctx, "approve", twice.NoTimeout); err != nil {
						return err
					}
				}
				ran <- job.Args.Step
				return nil
			}), nil)
			c := startClient(t, store, testConfig(reg))
			ctx := t.Context()
			res, err := c.EnqueueWorkflow(ctx, twice.NewWorkflow("refund 7").
				Add("review", reviewTask{"review"}, nil).
				Add("pay", reviewTask{"pay"}, nil, "review"))
			if err != nil {
				t.Fatal(err)
			}
			review := res.Jobs[0].ID
			waitJob(t, store, review, "waiting", isState(twicetype.JobStateWaiting))
			wf, err := c.WorkflowGet(ctx, res.Workflow.ID)
			if err != nil || wf.Workflow.State != twicetype.WorkflowRunning || wf.Workflow.Completed != 0 {
				t.Fatalf("workflow while its task waits = %+v, %v; want running, nothing completed", wf, err)
			}
			select {
			case step := <-ran:
				t.Fatalf("%s ran while review waits", step)
			default:
			}
			if _, err := c.Signal(ctx, &twice.SignalParams{JobID: review, Name: "approve", Payload: true}); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"review", "pay"} {
				if got := <-ran; got != want {
					t.Fatalf("ran %s, want %s next", got, want)
				}
			}
		})
	}
}

// TestSwitchHoldsAWokenJob: a job woken while its kind is switched off is
// held like any other (available, not run, no attempt spent) and runs once
// the switch is back on.
func TestSwitchHoldsAWokenJob(t *testing.T) {
	store := newStore(t)
	reg := twice.NewRegistry()
	var reserves, runs atomic.Int32
	if err := twice.Register(reg, refundHandler(&reserves, &runs, twice.NoTimeout), nil); err != nil {
		t.Fatal(err)
	}
	twice.MustRegister(reg, twice.HandlerFunc[pingArgs](func(context.Context, *twice.Job[pingArgs]) error { return nil }),
		&twice.KindOpts{Strategy: twice.None})
	logs := &syncBuffer{}
	cfg := testConfig(reg)
	cfg.TogglePollInterval = 20 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	c := startClient(t, store, cfg)
	ctx := t.Context()
	res, err := c.Enqueue(ctx, refundArgs{RefundID: "held"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := res.Job.ID
	waitJob(t, store, id, "waiting", isState(twicetype.JobStateWaiting))
	set := func(on bool) {
		t.Helper()
		if err := c.ToggleSet(ctx, &twice.ToggleSetParams{Kind: refundArgs{}.Kind(), Enabled: on, By: "test", Reason: "incident"}); err != nil {
			t.Fatal(err)
		}
	}
	set(false)
	waitfor.Cond(t, "the worker to switch the kind off", func() bool { return strings.Contains(logs.String(), "kind switched off") }, logs.String)
	if _, err := c.Signal(ctx, &twice.SignalParams{JobID: id, Name: "approve", Payload: approval{Approved: true, By: "ann"}}); err != nil {
		t.Fatal(err)
	}
	// A job of another kind, enqueued after the signal, runs: the worker
	// fetched since, and left the woken job where it is.
	ping, err := c.Enqueue(ctx, pingArgs{N: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, store, ping.Job.ID, "completed", isState(twicetype.JobStateCompleted))
	row := waitJob(t, store, id, "available", isState(twicetype.JobStateAvailable))
	if runs.Load() != 1 || row.Attempt != 0 {
		t.Fatalf("the woken job ran while its kind was off: %d runs, attempt %d", runs.Load(), row.Attempt)
	}
	set(true)
	waitJob(t, store, id, "completed", isState(twicetype.JobStateCompleted))
}
