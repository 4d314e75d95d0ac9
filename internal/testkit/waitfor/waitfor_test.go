package waitfor_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice/internal/testkit/waitfor"
)

// fatalTB records the first Fatalf and ends its goroutine the way a test's
// FailNow does, so a wait's failure can be checked without failing this test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls wait with a fatalTB on a goroutine of its own and returns the
// failure message, "" if wait returned.
func run(t *testing.T, wait func(testing.TB)) string {
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait(f)
	}()
	waitfor.Closed(t, done, "the wait to return or fail")
	return f.msg
}

func TestMatchSkipsValuesUntilOneMatches(t *testing.T) {
	t.Parallel()
	lines := make(chan string, 3)
	lines <- "starting"
	lines <- "listening on :0"
	lines <- "serving jobs"
	got := waitfor.Match(t, lines, (chan int)(nil), func(l string) bool { return strings.HasPrefix(l, "serving") }, "the serving line", nil)
	if got != "serving jobs" {
		t.Errorf("Match returned %q, want the serving line", got)
	}
}

func TestMatchFailsWhenStopComesFirst(t *testing.T) {
	t.Parallel()
	lines := make(chan string, 1)
	lines <- "starting"
	exited := make(chan int, 1)
	exited <- 2
	msg := run(t, func(tb testing.TB) {
		waitfor.Match(tb, lines, exited, func(l string) bool { return l == "serving" }, "the serving line", func() string { return "the output" })
	})
	if !strings.Contains(msg, "stopped (2) before the serving line") || !strings.Contains(msg, "last seen: the output") {
		t.Errorf("failure %q, want the stop's value, what was awaited and the output", msg)
	}
}

func TestMatchFailsWhenTheChannelClosesWithoutAMatch(t *testing.T) {
	t.Parallel()
	lines := make(chan string)
	close(lines)
	msg := run(t, func(tb testing.TB) {
		waitfor.Match(tb, lines, (chan int)(nil), func(l string) bool { return l == "serving" }, "the serving line", nil)
	})
	if !strings.Contains(msg, "closed before the serving line") {
		t.Errorf("failure %q, want the closed channel named", msg)
	}
}

func TestRecvBeforeReturnsOnAClosedChannel(t *testing.T) {
	t.Parallel()
	seen := make(chan struct{})
	close(seen)
	exited := make(chan int) // never
	if msg := run(t, func(tb testing.TB) { waitfor.RecvBefore(tb, seen, exited, "the banner", nil) }); msg != "" {
		t.Errorf("RecvBefore failed on a closed channel: %s", msg)
	}
}

func TestRecvWithinFailsAfterItsOwnDeadline(t *testing.T) {
	t.Parallel()
	never := make(chan int)
	msg := run(t, func(tb testing.TB) { waitfor.RecvWithin(tb, time.Millisecond, never, "a value") })
	if msg != "waited 1ms for a value" {
		t.Errorf("failure %q, want the deadline and what was awaited", msg)
	}
}
