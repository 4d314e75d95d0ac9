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
	return RecvWithin(t, Timeout, ch, what)
}

// RecvWithin is Recv with a deadline of its own, for the few waits known
// to take longer than Timeout (a backlog of hundreds of jobs under the race
// detector).
func RecvWithin[T any](t testing.TB, timeout time.Duration, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("waited %s for %s", timeout, what)
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
			t.Fatalf("waited %s for %s%s", timeout, what, lastSeen(last))
		}
		<-ticker.C
	}
}

// RecvBefore returns the next value from ch (or its zero value once ch is
// closed), failing the test if stop yields or is closed first, or if
// neither happens within Timeout. It is the wait for something a process
// or goroutine does, unless it ends first: stop is its exit. The failure
// says what, what stop gave, and, if last is not nil, what last returns
// (the output so far).
func RecvBefore[T, S any](t testing.TB, ch <-chan T, stop <-chan S, what string, last func() string) T {
	t.Helper()
	return Match(t, ch, stop, func(T) bool { return true }, what, last)
}

// Match receives from ch until a value satisfies match and returns it: one
// line among a process's output, one state among several reloads. One
// deadline, Timeout, bounds the whole wait, not each value, so values that
// keep coming without a match still end it. It fails the test if stop
// yields or is closed first (a nil stop never does), if ch is closed with
// no match, or after Timeout; the failure says what, what stop gave, and,
// if last is not nil, what last returns.
func Match[T, S any](t testing.TB, ch <-chan T, stop <-chan S, match func(T) bool, what string, last func() string) T {
	t.Helper()
	timer := time.NewTimer(Timeout)
	defer timer.Stop()
	for {
		select {
		case v, ok := <-ch:
			if match(v) {
				return v
			}
			if !ok {
				t.Fatalf("the channel closed before %s%s", what, lastSeen(last))
				panic("unreachable")
			}
		case s := <-stop:
			t.Fatalf("stopped (%v) before %s%s", s, what, lastSeen(last))
			panic("unreachable")
		case <-timer.C:
			t.Fatalf("waited %s for %s%s", Timeout, what, lastSeen(last))
			panic("unreachable")
		}
	}
}

// lastSeen is the tail of a failure message: what last returns, if any.
func lastSeen(last func() string) string {
	if last == nil {
		return ""
	}
	return "; last seen: " + last()
}
