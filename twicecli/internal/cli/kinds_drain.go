package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice"
)

// drainIntervalDefault is how often `kinds drain --wait` asks again: a
// deploy script waits seconds more at most, and the database answers a
// handful of small reads each time.
const drainIntervalDefault = 2 * time.Second

// drainProgressEvery is how often --wait repeats an unchanged progress
// line, so a deploy log shows the wait is alive without a line per poll.
const drainProgressEvery = time.Minute

func (c *cli) kindsDrainCommand() *cobra.Command {
	var asJSON, wait bool
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "drain KIND",
		Short: "Tell whether a kind version can be removed: its jobs, schedules, workflow tasks and live workers, and a verdict",
		Long: "Report what still holds the kind version KIND: its jobs waiting, scheduled, retrying, running,\n" +
			"parked (a durable wait) or dead, its tasks in running workflows, the schedules that enqueue it and\n" +
			"the live workers that register it; then one verdict, \"safe to remove\" or \"not safe: ...\" naming\n" +
			"what holds it. Completed, discarded and cancelled jobs do not hold a kind.\n\n" +
			"Exit status 0 when safe, 1 when not (or on a failure), 2 for bad input such as an unknown kind.\n" +
			"With --wait it asks again every --interval until the kind is safe, printing progress on stderr,\n" +
			"for a deploy script that removes the handler next; Ctrl-C stops the wait (exit 1).",
		Example: "  twice kinds drain email.welcome.v1\n" +
			"  twice kinds drain email.welcome.v1 --wait --interval 10s && deploy-without-v1",
		Args: exactArgs(1, "KIND"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			if interval <= 0 {
				return usagef("--interval %s: give a positive duration such as 2s", interval)
			}
			client, done, err := c.openClient(cmd)
			if err != nil {
				return err
			}
			defer done()
			ctx := cmd.Context()
			var lastReason string
			var lastPrinted time.Time
			for {
				r, err := client.KindDrain(ctx, args[0])
				if err != nil {
					if ctx.Err() != nil {
						return fmt.Errorf("stopped waiting for %s to drain: %w", args[0], ctx.Err())
					}
					return err
				}
				if r.Safe || !wait {
					if err := c.printDrain(r, asJSON); err != nil {
						return err
					}
					if !r.Safe {
						return &failure{err: fmt.Errorf("kind %s is %s", r.Kind, r.Reason)}
					}
					return nil
				}
				if r.Reason != lastReason || time.Since(lastPrinted) >= drainProgressEvery {
					fmt.Fprintf(c.stderr, "%s: %s %s; checking again every %s\n",
						c.name, terminalText(r.Kind), terminalText(r.Reason), interval)
					lastReason, lastPrinted = r.Reason, time.Now()
				}
				t := time.NewTimer(interval)
				select {
				case <-ctx.Done():
					t.Stop()
					return fmt.Errorf("stopped waiting for %s to drain (%s): %w", r.Kind, r.Reason, ctx.Err())
				case <-t.C:
				}
			}
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().BoolVar(&wait, "wait", false, "ask again until the kind is safe to remove, printing progress on stderr")
	cmd.Flags().DurationVar(&interval, "interval", drainIntervalDefault, "how often --wait asks again")
	return cmd
}

// printDrain prints a drain report: one line per thing that can hold a
// kind, then the verdict.
func (c *cli) printDrain(r *twice.KindDrainReport, asJSON bool) error {
	if asJSON {
		return writeJSON(c.stdout, r)
	}
	w := c.stdout
	fmt.Fprintf(w, "kind %s\n", terminalText(r.Kind))
	jobs := func(label string, n int, class string) {
		fmt.Fprintf(w, "  %-15s %d", label, n)
		if ids := r.JobIDs[class]; len(ids) > 0 {
			s := make([]string, len(ids))
			for i, id := range ids {
				s[i] = fmt.Sprint(id)
			}
			more := ""
			if n > len(ids) {
				more = ", …"
			}
			fmt.Fprintf(w, "  (job %s%s)", strings.Join(s, ", "), more)
		}
		fmt.Fprintln(w)
	}
	jobs("waiting", r.Waiting, "waiting")
	jobs("scheduled", r.Scheduled, "scheduled")
	jobs("retrying", r.Retrying, "retrying")
	jobs("running", r.Running, "running")
	jobs("parked", r.Parked, "parked")
	jobs("dead", r.Dead, "dead")
	fmt.Fprintf(w, "  %-15s %d", "workflow tasks", r.WorkflowTasks)
	if len(r.Workflows) > 0 {
		fmt.Fprintf(w, "  (workflow %s)", strings.Trim(fmt.Sprint(r.Workflows), "[]"))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  %-15s %d", "batch callbacks", r.BatchCallbacks)
	if len(r.Batches) > 0 {
		fmt.Fprintf(w, "  (batch %s)", strings.Trim(fmt.Sprint(r.Batches), "[]"))
	}
	fmt.Fprintln(w)
	names(w, "schedules", r.Schedules)
	if len(r.StaleSchedules) > 0 {
		names(w, "stale schedules", r.StaleSchedules)
	}
	names(w, "live workers", r.Workers)
	fmt.Fprintln(w, terminalText(r.Reason))
	return nil
}

// names prints a labelled list of stored names, "none" when empty.
func names(w io.Writer, label string, list []string) {
	s := "none"
	if len(list) > 0 {
		clean := make([]string, len(list))
		for i, n := range list {
			clean[i] = terminalText(n)
		}
		s = strings.Join(clean, ", ")
	}
	fmt.Fprintf(w, "  %-15s %s\n", label, s)
}
