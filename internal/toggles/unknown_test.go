package toggles

import "testing"

func TestUnknown(t *testing.T) {
	t.Parallel()
	registered := []string{
		"legacy.partner-benefits.v1",
		"email.partner-verification.v1",
		"email.welcome.v1",
		"balance.credit.v1",
		"balance.debit.v1",
	}
	tests := []struct {
		name string
		key  string
		want UnknownKey // Key "" means: not unknown
	}{
		{"registered", "balance.credit.v1", UnknownKey{}},
		{"registered in another case", "Legacy.Partner-Benefits.V1", UnknownKey{}},
		{"seed typo: missing letter", "legacy.partner-benfits.v1",
			UnknownKey{Key: "legacy.partner-benfits.v1", Suggestion: "legacy.partner-benefits.v1", Distance: 1}},
		{"seed typo: dash for dot and missing letter", "legacy-partner-benfits.v1",
			UnknownKey{Key: "legacy-partner-benfits.v1", Suggestion: "legacy.partner-benefits.v1", Distance: 2}},
		{"typo in another case", "LEGACY.PARTNER-BENFITS.V1",
			UnknownKey{Key: "LEGACY.PARTNER-BENFITS.V1", Suggestion: "legacy.partner-benefits.v1", Distance: 1}},
		{"swapped letters count once", "email.wlecome.v1",
			UnknownKey{Key: "email.wlecome.v1", Suggestion: "email.welcome.v1", Distance: 1}},
		{"missing version", "email.welcome",
			UnknownKey{Key: "email.welcome", Suggestion: "email.welcome.v1", Distance: 3}},
		{"short key, nothing close", "ab",
			UnknownKey{Key: "ab"}},
		{"unrelated: no suggestion", "reports.nightly.v1",
			UnknownKey{Key: "reports.nightly.v1"}},
		{"wrong version suggests the registered one", "balance.credit.v22",
			UnknownKey{Key: "balance.credit.v22", Suggestion: "balance.credit.v1", Distance: 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Unknown([]string{tc.key}, registered)
			if tc.want.Key == "" {
				if len(got) != 0 {
					t.Fatalf("got %+v, want not unknown", got)
				}
				return
			}
			if len(got) != 1 || got[0] != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestUnknownMessageAndOrder(t *testing.T) {
	t.Parallel()
	got := Unknown(
		[]string{"zzz.v1", "legacy.partner-benfits.v1", "email.welcome.v1", "ZZZ.V1", "balance.debit.v2"},
		[]string{"legacy.partner-benefits.v1", "email.welcome.v1", "balance.credit.v1", "balance.debit.v1"})
	want := []string{
		`toggle key "zzz.v1" names no registered kind`,
		`toggle key "legacy.partner-benfits.v1" names no registered kind; did you mean legacy.partner-benefits.v1?`,
		`toggle key "balance.debit.v2" names no registered kind; did you mean balance.debit.v1?`,
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %d keys", got, len(want))
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("got %s\nwant %s", got[i], want[i])
		}
	}
}

func TestUnknownTieGoesAlphabetically(t *testing.T) {
	t.Parallel()
	got := Unknown([]string{"job.c.v1"}, []string{"job.b.v1", "job.a.v1"})
	if len(got) != 1 || got[0].Suggestion != "job.a.v1" || got[0].Distance != 1 {
		t.Fatalf("got %+v, want job.a.v1 at distance 1", got)
	}
}

func TestEditDistance(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "abc", 3},
		{"abc", "", 3},
		{"abc", "abc", 0},
		{"abc", "abd", 1},
		{"abc", "acb", 1}, // adjacent swap
		{"kitten", "sitting", 3},
		{"benfits", "benefits", 1},
		{"ca", "abc", 3},      // OSA, not full Damerau (which says 2)
		{"héllo", "hello", 1}, // runes, not bytes
	}
	for _, tc := range tests {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
