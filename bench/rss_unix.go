//go:build unix

package bench

import (
	"runtime"
	"syscall"
)

// MaxRSSMB is the peak resident set size of this process so far, in MiB,
// from getrusage (Linux's VmHWM).
func MaxRSSMB() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	kib := float64(ru.Maxrss)
	if runtime.GOOS == "darwin" { // bytes there, kilobytes elsewhere
		kib /= 1024
	}
	return round(kib/1024, 1)
}
