// Package backoff computes retry delays: exponential in the attempt, capped,
// with jitter so a burst of failures does not retry in lock step.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Cap is the longest delay between two attempts.
const Cap = time.Hour

// JitterFraction is the largest random extra, as a fraction of the delay.
const JitterFraction = 0.2

// Delay returns the wait before the next attempt after attempt (1-based)
// failed: 1s, 2s, 4s, … capped at Cap, plus up to JitterFraction more.
func Delay(attempt int) time.Duration {
	d := Base(attempt)
	return d + time.Duration(rand.Float64()*JitterFraction*float64(d))
}

// Base is Delay without the jitter.
func Base(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	if attempt > 13 { // 1s<<12 already exceeds the cap
		return Cap
	}
	return min(time.Second<<(attempt-1), Cap)
}

// Horizon is the longest time a job with maxAttempts attempts can spend
// retrying: every delay at its largest jitter.
func Horizon(maxAttempts int, delay func(attempt int) time.Duration) time.Duration {
	var total time.Duration
	for a := 1; a < maxAttempts; a++ {
		total += delay(a)
	}
	return total
}

// MaxDelay is Delay at its largest jitter, for computing horizons.
func MaxDelay(attempt int) time.Duration {
	d := Base(attempt)
	return d + time.Duration(JitterFraction*float64(d))
}
