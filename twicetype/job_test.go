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
		{JobStateWaiting, true, false},
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
	if len(AllJobStates) != 7 {
		t.Errorf("AllJobStates = %v, want the seven states", AllJobStates)
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

func TestUniqueStates(t *testing.T) {
	t.Parallel()
	// The bits are stored: they must never move.
	for s, bit := range map[JobState]UniqueStates{
		JobStateAvailable: 1, JobStateRunning: 2, JobStateCompleted: 4,
		JobStateDead: 8, JobStateDiscarded: 16, JobStateCancelled: 32, "canceled": 0,
	} {
		if got := s.UniqueBit(); got != bit {
			t.Errorf("%q.UniqueBit() = %d, want %d", s, got, bit)
		}
	}
	for _, s := range AllJobStates {
		if s.UniqueBit() == 0 {
			t.Errorf("state %q has no unique bit", s)
		}
	}
	for _, tc := range []struct {
		u       UniqueStates
		str     string
		wantErr bool
	}{
		{0, "none", false}, // zero is the default
		{UniqueStatesDefault, "available|running", false},
		{UniqueStatesOf(JobStateCompleted, JobStateRunning, JobStateAvailable), "available|running|completed", false},
		{UniqueStatesOf(AllJobStates...), "available|running|completed|dead|discarded|cancelled", false},
		{UniqueAvailable, "available", true},
		{UniqueAvailable | UniqueCompleted, "available|completed", true},
		{UniqueStatesDefault | 64, "available|running|0x40", true},
		{UniqueStatesDefault | UniqueDiscarded, "available|running|discarded", true},
		{UniqueStatesDefault | UniqueDiscarded | UniqueDead, "available|running|dead|discarded", false},
	} {
		if got := tc.u.String(); got != tc.str {
			t.Errorf("UniqueStates(%d).String() = %q, want %q", tc.u, got, tc.str)
		}
		if err := tc.u.Validate(); (err != nil) != tc.wantErr {
			t.Errorf("UniqueStates(%s).Validate() = %v, want an error: %v", tc.u, err, tc.wantErr)
		}
	}
	u := UniqueStatesOf(JobStateAvailable, JobStateRunning, JobStateDead)
	if !u.Has(JobStateDead) || u.Has(JobStateCompleted) || u.Has("nope") {
		t.Errorf("Has on %s is wrong", u)
	}
	if UniqueStates(0).OrDefault() != UniqueStatesDefault || u.OrDefault() != u {
		t.Error("OrDefault is wrong")
	}
}
