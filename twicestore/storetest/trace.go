package storetest

import (
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

var traceTests = []test{
	{"OutcomeKeepsAttemptTrace", testTraceKept},
	{"WorkflowTaskReleasedWithDepsTraces", testTraceWorkflow},
}

// Two traceparents, as a tracer would write them.
const (
	traceA = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	traceB = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"
)

// testTraceKept: a written outcome's Trace replaces the job's, an empty
// one too (that attempt had no span); a fenced outcome writes none.
func testTraceKept(t *testing.T, e *env) {
	const kind = "storetest.trace.v1"
	e.insertOne(e.job(kind))
	j := e.fetchOne(e.base, kind)
	if j.Trace != "" {
		t.Fatalf("a new job's trace = %q, want empty", j.Trace)
	}
	ae := twicetype.AttemptError{Attempt: 1, At: e.base, Error: "boom"}
	if !e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateAvailable,
		RunAt: e.base, Error: &ae, Trace: traceA})[0] {
		t.Fatal("retry not applied")
	}
	j = e.fetchOne(e.at(time.Minute), kind)
	if j.Trace != traceA {
		t.Fatalf("fetched after a retry: trace = %q, want %q", j.Trace, traceA)
	}
	// A stale holder's outcome is fenced: its trace is not written.
	if e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch - 1, State: twicetype.JobStateCompleted,
		FinishedAt: e.base, Trace: traceB})[0] {
		t.Fatal("a stale epoch's outcome was applied")
	}
	if got := e.get(j.ID).Trace; got != traceA {
		t.Fatalf("after a fenced outcome: trace = %q, want %q", got, traceA)
	}
	// No trace in the outcome (no tracer on that node): none is kept.
	if !e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted, FinishedAt: e.base})[0] {
		t.Fatal("completion not applied")
	}
	if got := e.get(j.ID).Trace; got != "" {
		t.Fatalf("after an outcome without a trace: trace = %q, want empty", got)
	}
}

// testTraceWorkflow: a task released by its dependencies' completions
// carries their traces, in task-name order, so its first attempt can link
// to them.
func testTraceWorkflow(t *testing.T, e *env) {
	res := e.workflow(twicetype.WorkflowOnDeadHold, e.task("a"), e.task("b"), e.task("c", "a", "b"), e.task("d", "c"))
	wf := res.Workflow.ID
	for _, done := range []struct{ name, trace string }{{"b", traceB}, {"a", traceA}} {
		name, trace := done.name, done.trace
		for _, tk := range e.workflowGet(wf).Tasks {
			if tk.Name != name {
				continue
			}
			j := e.leaseID(tk.Job.ID)
			if !e.finish(&twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted,
				FinishedAt: e.at(time.Second), Trace: trace})[0] {
				t.Fatalf("completing %s not applied", name)
			}
		}
	}
	var c *twicetype.JobRow
	for _, tk := range e.workflowGet(wf).Tasks {
		if tk.Name == "c" {
			c = tk.Job
		}
	}
	if c == nil {
		t.Fatalf("task c was not released: %s", taskStates(e.workflowGet(wf)))
	}
	if want := traceA + "," + traceB; c.Trace != want {
		t.Fatalf("released task c: trace = %q, want %q", c.Trace, want)
	}
	// A dependency completed without a trace gives none.
	e.runTask(wf, "c", twicetype.JobStateCompleted)
	for _, tk := range e.workflowGet(wf).Tasks {
		if tk.Name == "d" && (tk.Job == nil || tk.Job.Trace != "") {
			t.Fatalf("task d: %+v, want released with no trace", tk.Job)
		}
	}
}
