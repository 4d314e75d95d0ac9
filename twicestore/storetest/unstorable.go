package storetest

import (
	"errors"
	"testing"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

var unstorableTests = []test{
	{"OutcomeStoredOrRefused", testUnstorableOutcome},
}

// testUnstorableOutcome: an outcome holding a value the database cannot
// store (a NUL byte, bytes that are not UTF-8) is either stored as it is
// (SQLite) or refused with an error wrapping ErrUnstorable, writing
// nothing (PostgreSQL): never another error, which the completer would
// retry for ever.
func testUnstorableOutcome(t *testing.T, e *env) {
	tests := []struct {
		name string
		set  func(o *twicestore.JobOutcome)
		got  func(j *twicetype.JobRow, out *twicestore.JobOutputResult) string
		want string
	}{
		{"note with NUL", func(o *twicestore.JobOutcome) { o.Note = "a\x00b" },
			func(j *twicetype.JobRow, _ *twicestore.JobOutputResult) string { return j.Note }, "a\x00b"},
		{"note not UTF-8", func(o *twicestore.JobOutcome) { o.Note = "a\xffb" },
			func(j *twicetype.JobRow, _ *twicestore.JobOutputResult) string { return j.Note }, "a\xffb"},
		{"error with NUL", func(o *twicestore.JobOutcome) {
			o.State, o.FinishedAt = twicetype.JobStateDead, e.base
			o.Error = &twicetype.AttemptError{Attempt: 1, At: e.base, Error: "boom\x00"}
		}, func(j *twicetype.JobRow, _ *twicestore.JobOutputResult) string {
			if len(j.Errors) == 0 {
				return ""
			}
			return j.Errors[0].Error
		}, "boom\x00"},
		{"output not UTF-8", func(o *twicestore.JobOutcome) { o.Output = []byte("\"caf\xe9\"") },
			func(_ *twicetype.JobRow, out *twicestore.JobOutputResult) string { return string(out.Output) }, "\"caf\xe9\""},
	}
	for _, tt := range tests {
		j := e.fetchOne(e.base, e.insertOne(e.job("k.unstorable")).Kind)
		o := &twicestore.JobOutcome{ID: j.ID, Epoch: j.Epoch, State: twicetype.JobStateCompleted, FinishedAt: e.base}
		tt.set(o)
		res, err := e.s.JobFinish(e.ctx, &twicestore.JobFinishParams{Outcomes: []*twicestore.JobOutcome{o}})
		row, gerr := e.s.JobGet(e.ctx, &twicestore.JobGetParams{ID: j.ID})
		if gerr != nil {
			t.Fatal(gerr)
		}
		switch {
		case err != nil && !errors.Is(err, twicestore.ErrUnstorable):
			t.Errorf("%s: JobFinish: %v, want it stored or refused with ErrUnstorable", tt.name, err)
		case err != nil && row.State != twicetype.JobStateRunning:
			t.Errorf("%s: refused, but the job is %s: a refused write must write nothing", tt.name, row.State)
		case err == nil:
			out, oerr := e.s.JobOutput(e.ctx, &twicestore.JobGetParams{ID: j.ID})
			if oerr != nil {
				t.Fatal(oerr)
			}
			if !res.Applied[0] || tt.got(row, out) != tt.want {
				t.Errorf("%s: stored %q (applied %v), want it stored as it was, %q", tt.name, tt.got(row, out), res.Applied[0], tt.want)
			}
		}
	}
}
