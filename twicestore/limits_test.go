package twicestore_test

import (
	"slices"
	"testing"
	"time"

	"github.com/twicejobs/twice/twicestore"
)

// TestKindLimitPhrases: the words the CLI and the dashboard show for a
// kind's limits, periods as people write them.
func TestKindLimitPhrases(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		limit twicestore.KindLimit
		want  []string
	}{
		{"None", twicestore.KindLimit{}, nil},
		{"All", twicestore.KindLimit{Global: 10, PerKey: 1, KeyOrderSkipsRetries: true,
			Rate: twicestore.RateLimit{Limit: 100, Period: time.Second}, KeyRate: twicestore.RateLimit{Limit: 5, Period: 5 * time.Minute}},
			[]string{"global 10", "per key 1", "retries out of key order", "rate 100/1s", "key rate 5/5m"}},
		{"Hours", twicestore.KindLimit{Rate: twicestore.RateLimit{Limit: 3, Period: 2 * time.Hour}}, []string{"rate 3/2h"}},
		{"HoursAndMinutes", twicestore.KindLimit{Rate: twicestore.RateLimit{Limit: 3, Period: 90 * time.Minute}}, []string{"rate 3/1h30m"}},
		{"MinutesAndSeconds", twicestore.KindLimit{KeyRate: twicestore.RateLimit{Limit: 1, Period: 90 * time.Second}}, []string{"key rate 1/1m30s"}},
		{"Milliseconds", twicestore.KindLimit{Rate: twicestore.RateLimit{Limit: 1, Period: 250 * time.Millisecond}}, []string{"rate 1/250ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.limit.Phrases(); !slices.Equal(got, tc.want) {
				t.Errorf("Phrases() = %q, want %q", got, tc.want)
			}
		})
	}
}
