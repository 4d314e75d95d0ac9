// Package periodic runs a background task on a jittered interval until its
// context ends, so nodes started together do not hit the database in step.
package periodic

import (
	"context"
	"math/rand/v2"
	"time"
)

// Run calls fn once right away, then every interval plus up to a tenth of
// it of random jitter, until ctx is done. fn's errors are its own to log.
func Run(ctx context.Context, interval time.Duration, fn func(ctx context.Context)) {
	for {
		fn(ctx)
		t := time.NewTimer(Jitter(interval))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Jitter returns d plus a random extra of up to a tenth of d.
func Jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d + rand.N(d/10+1)
}
