//go:build !unix

package bench

// MaxRSSMB is 0 where getrusage is not available.
func MaxRSSMB() float64 { return 0 }
