package cli

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestQueuesPauseResume (issue 11 item 4): pause and resume with who, why
// and until, shown by ls as paused, not stuck; bad input (an unknown
// queue, an until in the past, a resume of a queue not paused) changes
// nothing.
func TestQueuesPauseResume(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	due := s.enqueue(emailKind, `{"user_id": 1}`)
	later := s.enqueue(emailKind, `{"user_id": 2}`, "--delay", "1h")

	ls := func() map[string]queueJSON {
		var qs []queueJSON
		if err := json.Unmarshal([]byte(s.ok("queues", "ls", "--json").stdout), &qs); err != nil {
			t.Fatal(err)
		}
		m := map[string]queueJSON{}
		for _, q := range qs {
			m[q.Name] = q
		}
		return m
	}
	crit := ls()["critical"]
	if crit.Paused || crit.Due != 1 || crit.Scheduled != 1 || !crit.Stranded || len(crit.Nodes) != 0 {
		t.Errorf("critical before the pause: %+v", crit)
	}

	r := s.ok("queues", "pause", "critical", "--reason", "smtp maintenance", "--by", "ops@host", "--until", "2h")
	if !strings.HasPrefix(r.stdout, "paused queue critical until ") {
		t.Errorf("pause printed %q", r.stdout)
	}
	crit = ls()["critical"]
	if !crit.Paused || crit.By != "ops@host" || crit.Reason != "smtp maintenance" || crit.Until == nil || crit.Until.Before(time.Now().Add(time.Hour)) || crit.Due != 1 {
		t.Errorf("critical after the pause: %+v", crit)
	}
	if l := tableLine(t, s.ok("queues", "ls").stdout, "critical"); !strings.Contains(l, "paused") || !strings.Contains(l, "ops@host") {
		t.Errorf("queues ls line of the paused queue: %q", l)
	}
	// Its due job lists as paused, not stuck; the scheduled one as scheduled.
	if l := tableLine(t, s.ok("jobs").stdout, strconv.FormatInt(due, 10)); !strings.Contains(l, " paused ") {
		t.Errorf("jobs lists a due job of a paused queue as %q", l)
	}
	if l := tableLine(t, s.ok("jobs").stdout, strconv.FormatInt(later, 10)); !strings.Contains(l, " scheduled ") {
		t.Errorf("jobs lists a scheduled job of a paused queue as %q", l)
	}
	var jobs []jobJSON
	if err := json.Unmarshal([]byte(s.ok("jobs", "--json").stdout), &jobs); err != nil || len(jobs) != 2 || !jobs[0].QueuePaused {
		t.Errorf("jobs --json in a paused queue: %+v (%v)", jobs, err)
	}

	before := ls()
	for _, tc := range []struct {
		args  []string
		code  int
		wants []string
	}{
		{[]string{"queues", "pause", "critcal", "--reason", "x"}, ExitUsage, []string{`"critcal"`, "unknown queue", "critical"}},
		{[]string{"queues", "pause", "critical", "--reason", "x", "--until", "2020-01-01T00:00:00Z"}, ExitUsage, []string{"not in the future"}},
		{[]string{"queues", "pause", "critical", "--reason", "x", "--until", "-1m"}, ExitUsage, []string{"not in the future"}},
		{[]string{"queues", "pause", "critical", "--reason", "x", "--until", "later"}, ExitUsage, []string{"--until"}},
		{[]string{"queues", "pause", "critical"}, ExitUsage, []string{"--reason is required"}},
		{[]string{"queues", "resume", "bulk"}, ExitFailure, []string{"not paused"}},
		{[]string{"queues", "resume", "nowhere"}, ExitUsage, []string{"unknown queue"}},
		{[]string{"queues"}, ExitUsage, []string{"missing subcommand"}},
	} {
		wantError(t, s.run(tc.args...), tc.code, tc.wants...)
	}
	after := ls()
	if b, a := before["critical"], after["critical"]; b.Paused != a.Paused || !b.Until.Equal(*a.Until) || b.Reason != a.Reason {
		t.Errorf("refused input changed the pause: %+v -> %+v", b, a)
	}

	if r := s.ok("queues", "resume", "critical", "--reason", "done"); r.stdout != "resumed queue critical\n" {
		t.Errorf("resume printed %q", r.stdout)
	}
	if ls()["critical"].Paused {
		t.Error("critical still paused after resume")
	}
}
