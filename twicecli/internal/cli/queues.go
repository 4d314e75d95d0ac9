package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice"
)

func (c *cli) queuesCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "queues",
		Short: "Queues: their jobs and workers; pause, resume and scale them on every node",
	})
	cmd.AddCommand(c.queuesListCommand(), c.queuesPauseCommand(), c.queuesResumeCommand(), c.queuesScaleCommand())
	return cmd
}

// queueJSON is one queue as 'queues ls --json' prints it.
type queueJSON struct {
	Name      string     `json:"name"`
	Paused    bool       `json:"paused"`
	PausedAt  *time.Time `json:"paused_at,omitempty"`
	Until     *time.Time `json:"until,omitempty"`
	By        string     `json:"by,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	Due       int        `json:"due"`
	Scheduled int        `json:"scheduled"`
	Running   int        `json:"running"`
	Nodes     []string   `json:"nodes"`
	// Stranded reports waiting jobs that no live node works.
	Stranded bool `json:"stranded"`
}

func newQueueJSON(q twice.QueueInfo) queueJSON {
	out := queueJSON{Name: q.Name, Paused: q.Paused, By: q.By, Reason: q.Reason,
		Due: q.Due, Scheduled: q.Scheduled, Running: q.Running, Nodes: q.Nodes, Stranded: stranded(q)}
	if out.Nodes == nil {
		out.Nodes = []string{}
	}
	out.PausedAt, out.Until = timePtr(q.PausedAt), timePtr(q.Until)
	return out
}

// stranded reports a queue whose waiting jobs no live node works.
func stranded(q twice.QueueInfo) bool { return q.Due+q.Scheduled > 0 && len(q.Nodes) == 0 }

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func (c *cli) queuesListCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the queues: paused or not, due, scheduled and running jobs, the live nodes that work them",
		Long: `List every known queue: those with jobs or a pause, those the catalogued
kinds go to, and those live nodes work. For each: whether it is paused
(by whom, why, until when: open-ended until someone resumes it, without
--until), its due, scheduled and running jobs, and the live nodes that
work it. A queue with waiting jobs and no live node is
stranded: its jobs wait until a worker that serves it starts.`,
		Args: unknownSubcommand,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			return printList(c, cmd, asJSON, listing[twice.QueueInfo, queueJSON]{
				list: (*twice.Client).QueueList, toJSON: newQueueJSON,
				empty:  "no queues: no jobs, no workers and no catalogued kinds yet",
				header: "QUEUE\tSTATUS\tDUE\tSCHEDULED\tRUNNING\tNODES\tPAUSED BY\tUNTIL\tREASON",
				row:    queueRow,
			})
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// queueRow is one queue's line in 'queues ls'.
func queueRow(tw io.Writer, q twice.QueueInfo) {
	status, by, until, reason := "active", "-", "-", "-"
	switch {
	case q.Paused:
		status, by, reason = "paused", q.By, truncate(fmt.Sprintf("%q", q.Reason), 50)
		until = "open-ended" // until someone resumes it
		if !q.Until.IsZero() {
			until = formatTime(q.Until)
		}
	case stranded(q):
		status = "stranded"
	case len(q.Nodes) == 0:
		status = "idle"
	}
	nodes := "-"
	if len(q.Nodes) > 0 {
		nodes = strings.Join(q.Nodes, ",")
	}
	fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", terminalText(q.Name), status, q.Due, q.Scheduled, q.Running,
		terminalText(nodes), terminalText(by), until, reason)
}

func (c *cli) queuesPauseCommand() *cobra.Command {
	var reason, by, until string
	cmd := &cobra.Command{
		Use:   "pause QUEUE --reason WHY [--until TIME|DURATION]",
		Short: "Pause a queue on every node: no node fetches its jobs until it is resumed",
		Long: `Pause QUEUE on every node: no node fetches its jobs until 'queues resume',
or until --until. Running jobs go on; waiting jobs keep their attempts and
show as paused, not stuck. A queue no catalogued kind goes to, no worker
serves and that holds no jobs is refused, so a typo pauses nothing.`,
		Example: `  twice queues pause bulk --reason "reindexing the catalog"
  twice queues pause email --until 30m --reason "smtp provider maintenance"
  twice queues pause email --until 2026-12-01T06:00:00Z --reason "freeze"`,
		Args: exactArgs(1, "QUEUE"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(reason) == "" {
				return usagef(`--reason is required: say why the queue is paused, e.g. --reason "incident 42"`)
			}
			who, err := byFlag(cmd, by)
			if err != nil {
				return err
			}
			at, err := parseUntil("--until", until, time.Now())
			if err != nil {
				return err
			}
			client, done, err := c.openClient(cmd)
			if err != nil {
				return err
			}
			defer done()
			if err := client.QueuePause(cmd.Context(), &twice.QueuePauseParams{Queue: args[0], Until: at, By: who, Reason: reason}); err != nil {
				return err
			}
			if at.IsZero() {
				fmt.Fprintf(c.stdout, "paused queue %s until it is resumed ('%s queues resume %s')\n", args[0], c.name, args[0])
			} else {
				fmt.Fprintf(c.stdout, "paused queue %s until %s\n", args[0], formatTime(at))
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&reason, "reason", "", "why the queue is paused (required)")
	f.StringVar(&by, "by", "", "who pauses it (default $USER@hostname)")
	f.StringVar(&until, "until", "", "end the pause by itself: a time (RFC 3339, e.g. 2026-12-01T06:00:00Z) or a duration from now (e.g. 30m), at most 10 years ahead; without it the pause is open-ended")
	return cmd
}

func (c *cli) queuesResumeCommand() *cobra.Command {
	var reason, by string
	cmd := &cobra.Command{
		Use:   "resume QUEUE",
		Short: "Lift a queue's pause on every node",
		Args:  exactArgs(1, "QUEUE"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			who, err := byFlag(cmd, by)
			if err != nil {
				return err
			}
			client, done, err := c.openClient(cmd)
			if err != nil {
				return err
			}
			defer done()
			res, err := client.QueueResume(cmd.Context(), &twice.QueueResumeParams{Queue: args[0], By: who, Reason: reason})
			if err != nil {
				return err
			}
			if !res.Resumed {
				return fmt.Errorf("queue %s is not paused: nothing to resume", args[0])
			}
			fmt.Fprintf(c.stdout, "resumed queue %s\n", args[0])
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why it is resumed")
	cmd.Flags().StringVar(&by, "by", "", "who resumes it (default $USER@hostname)")
	return cmd
}

// untilMax bounds --until and --expires: an end further away than ten
// years means "never" (or a typo, or an overflow such as 9223372036s), and
// leaving the flag out says that.
const untilMax = 10 * 365 * 24 * time.Hour

func untilTooFar(flag, s string) error {
	return usagef("%s %s is more than 10 years away: for no end, leave it out", flag, s)
}

// parseUntil reads a time flag: empty for none, an RFC 3339 time, or a
// duration from now, at most untilMax ahead. A time that is not ahead is
// left to the admin API, which refuses it saying so.
func parseUntil(flag, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, usagef("%s %s is not in the future: give a positive duration, or a later time", flag, s)
		}
		if d > untilMax {
			return time.Time{}, untilTooFar(flag, s)
		}
		return now.Add(d), nil
	}
	if t, err := parseTime(flag, s); err == nil {
		if t.Sub(now) > untilMax {
			return time.Time{}, untilTooFar(flag, s)
		}
		return t, nil
	}
	return time.Time{}, usagef("%s %q: give a time like 2026-12-01T06:00:00Z (RFC 3339) or a duration like 30m", flag, s)
}
