package backoff

import (
	"testing"
	"time"
)

func TestBase(t *testing.T) {
	t.Parallel()
	tests := []struct {
		attempt int
		want    time.Duration
	}{
		{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second},
		{12, 2048 * time.Second}, {13, Cap}, {100, Cap},
	}
	for _, tt := range tests {
		if got := Base(tt.attempt); got != tt.want {
			t.Errorf("Base(%d) = %s, want %s", tt.attempt, got, tt.want)
		}
	}
}

func TestDelayStaysWithinJitter(t *testing.T) {
	t.Parallel()
	for attempt := 1; attempt <= 20; attempt++ {
		for range 50 {
			d := Delay(attempt)
			if d < Base(attempt) || d > MaxDelay(attempt) {
				t.Fatalf("Delay(%d) = %s, outside [%s, %s]", attempt, d, Base(attempt), MaxDelay(attempt))
			}
		}
	}
}

func TestHorizon(t *testing.T) {
	t.Parallel()
	if got := Horizon(1, Base); got != 0 {
		t.Errorf("one attempt has no retries: horizon = %s", got)
	}
	if got, want := Horizon(4, Base), 7*time.Second; got != want { // 1s + 2s + 4s
		t.Errorf("Horizon(4) = %s, want %s", got, want)
	}
}
