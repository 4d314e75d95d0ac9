package twicetype

import "testing"

func TestJobStates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		state    JobState
		valid    bool
		finished bool
	}{
		{JobStateAvailable, true, false},
		{JobStateRunning, true, false},
		{JobStateCompleted, true, true},
		{JobStateDead, true, true},
		{JobStateDiscarded, true, true},
		{JobStateCancelled, true, true},
		{"canceled", false, false},
		{"", false, false},
	} {
		if got := tc.state.Valid(); got != tc.valid {
			t.Errorf("%q.Valid() = %v, want %v", tc.state, got, tc.valid)
		}
		if got := tc.state.Finished(); got != tc.finished {
			t.Errorf("%q.Finished() = %v, want %v", tc.state, got, tc.finished)
		}
	}
	if len(AllJobStates) != 6 {
		t.Errorf("AllJobStates = %v, want the six states", AllJobStates)
	}
	for _, s := range AllJobStates {
		if !s.Valid() {
			t.Errorf("AllJobStates lists %q, which is not Valid", s)
		}
	}
}

func TestCancelRequestNote(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		req  CancelRequest
		want string
	}{
		{CancelRequest{}, "cancelled"},
		{CancelRequest{By: "ops@host"}, "cancelled by ops@host"},
		{CancelRequest{Reason: "wrong customer"}, "cancelled: wrong customer"},
		{CancelRequest{By: "ops@host", Reason: "wrong customer"}, "cancelled by ops@host: wrong customer"},
	} {
		if got := tc.req.Note(); got != tc.want {
			t.Errorf("%+v.Note() = %q, want %q", tc.req, got, tc.want)
		}
	}
}
