package twicetype_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicetype"
)

func TestToggleStateOf(t *testing.T) {
	now := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		toggle  twicetype.Toggle
		want    twicetype.ToggleState
		expired bool
	}{
		{"on, no expiry", twicetype.Toggle{Enabled: true}, twicetype.ToggleOn, false},
		{"off, no expiry", twicetype.Toggle{}, twicetype.ToggleOff, false},
		{"off, expires later", twicetype.Toggle{ExpiresAt: now.Add(time.Microsecond)}, twicetype.ToggleOff, false},
		{"off, expires now", twicetype.Toggle{ExpiresAt: now}, twicetype.ToggleNone, true},
		{"on, expired", twicetype.Toggle{Enabled: true, ExpiresAt: now.Add(-time.Hour)}, twicetype.ToggleNone, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.toggle.StateOf(now); got != tc.want {
				t.Errorf("StateOf = %q, want %q", got, tc.want)
			}
			if got := tc.toggle.Expired(now); got != tc.expired {
				t.Errorf("Expired = %t, want %t", got, tc.expired)
			}
		})
	}
}

// A switch set to expire stops counting at its expiry: from then on the
// store leaves it out of ToggleList and the kind follows its default.
func ExampleToggle_StateOf() {
	set := time.Date(2031, 3, 4, 9, 0, 0, 0, time.UTC)
	tg := twicetype.Toggle{Kind: "email.send.v1", Enabled: false, Reason: "provider maintenance",
		At: set, ExpiresAt: set.Add(2 * time.Hour)}
	fmt.Println(tg.StateOf(set.Add(time.Hour)))
	fmt.Println(tg.StateOf(set.Add(2 * time.Hour)))
	// Output:
	// off
	// none
}
