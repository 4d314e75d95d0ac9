// Package waitfor is the one way tests wait for something asynchronous: a
// value on a channel, a closed channel, or a condition on state that sends
// no signal (a row in the database). Every wait has a deadline and fails
// the test with what it waited for, so a lost wake-up is a failure with a
// message instead of a hung test binary.
package waitfor

import (
	"testing"
	"time"
)

// Timeout bounds every wait. It is generous because the race detector and
// a busy machine slow everything down; it is a bound on a hang, not an
// expectation of how long anything takes.
const Timeout = 30 * time.Second

// tick is how often Cond checks a condition that has no signal of its own.
const tick = 5 * time.Millisecond

// Recv returns the next value from ch, failing the test if none comes
// within Timeout. what says what the value means ("the handler started").
func Recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(Timeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("waited %s for %s", Timeout, what)
		panic("unreachable")
	}
}

// Closed waits until ch is closed (or yields a value), failing the test
// after Timeout.
func Closed[T any](t testing.TB, ch <-chan T, what string) {
	t.Helper()
	Recv(t, ch, what)
}

// Cond waits until cond returns true, checking it every few milliseconds,
// and fails the test after Timeout with what and, if last is not nil, what
// last returns (the state seen last, for the failure message). Use it only
// for state that sends no signal, such as a row in the database; wait on a
// channel when there is one.
func Cond(t testing.TB, what string, cond func() bool, last func() string) {
	t.Helper()
	CondWithin(t, Timeout, what, cond, last)
}

// CondWithin is Cond with a deadline of its own, for the few waits known
// to take longer than Timeout (a stress run under the race detector).
func CondWithin(t testing.TB, timeout time.Duration, what string, cond func() bool, last func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			msg := ""
			if last != nil {
				msg = "; last seen: " + last()
			}
			t.Fatalf("waited %s for %s%s", timeout, what, msg)
		}
		<-ticker.C
	}
}
