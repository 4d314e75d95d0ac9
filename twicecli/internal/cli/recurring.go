package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice"
)

func (c *cli) recurringCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "recurring",
		Short: "Recurring schedules: list them with their last tick; remove one the code dropped; trigger one now",
	})
	cmd.AddCommand(c.recurringListCommand(), c.recurringRemoveCommand(), c.recurringTriggerCommand())
	return cmd
}

// scheduleJSON is one schedule as 'recurring ls --json' prints it.
type scheduleJSON struct {
	Name        string     `json:"name"`
	Kind        string     `json:"kind"`
	Spec        string     `json:"spec"`
	LastTickAt  *time.Time `json:"last_tick_at,omitempty"`
	LastOutcome string     `json:"last_outcome,omitempty"`
	LastJobID   int64      `json:"last_job_id,omitempty"`
	NextAt      *time.Time `json:"next_at,omitempty"`
	UpdatedAt   *time.Time `json:"updated_at,omitempty"`
	// Recorded: the store has it. Registered: this binary defines it.
	// Published: a worker's catalog defines it.
	Recorded   bool `json:"recorded"`
	Registered bool `json:"registered"`
	Published  bool `json:"published"`
}

func (c *cli) recurringListCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the schedules: recorded by a scheduler, registered here or published by a worker",
		Long: `List the recurring schedules: those a scheduler recorded (each one's spec,
its last tick and what became of it: enqueued, with the job id, or skipped
because its kind was switched off; and its next run), those this binary
registers and those a worker published to the catalog. A schedule that is
recorded but neither registered nor published was removed from the code:
'recurring rm' removes its record.`,
		Args: unknownSubcommand,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			return printList(c, cmd, asJSON, listing[twice.ScheduleInfo, scheduleJSON]{
				list: (*twice.Client).ScheduleList, toJSON: newScheduleJSON,
				empty:  "no schedules: none has ticked, and none is registered here or published by a worker",
				header: "NAME\tKIND\tSPEC\tLAST TICK\tOUTCOME\tJOB\tNEXT RUN\tDEFINED BY",
				row:    scheduleRow,
			})
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newScheduleJSON(s twice.ScheduleInfo) scheduleJSON {
	return scheduleJSON{Name: s.Name, Kind: s.Kind, Spec: s.Spec,
		LastTickAt: timePtr(s.LastTickAt), LastOutcome: s.LastOutcome, LastJobID: s.LastJobID,
		NextAt: timePtr(s.NextAt), UpdatedAt: timePtr(s.UpdatedAt),
		Recorded: s.Recorded, Registered: s.Registered, Published: s.Published}
}

// scheduleRow is one schedule's line in 'recurring ls'.
func scheduleRow(tw io.Writer, s twice.ScheduleInfo) {
	job, outcome := "-", "-"
	if s.LastJobID != 0 {
		job = fmt.Sprint(s.LastJobID)
	}
	if s.LastOutcome != "" {
		outcome = s.LastOutcome
	}
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", terminalText(s.Name), terminalText(s.Kind), terminalText(s.Spec),
		formatTime(s.LastTickAt), terminalText(outcome), job, formatTime(s.NextAt), definedBy(s))
}

// definedBy says where a schedule is still defined.
func definedBy(s twice.ScheduleInfo) string {
	var where []string
	if s.Registered {
		where = append(where, "this binary")
	}
	if s.Published {
		where = append(where, "a worker")
	}
	if len(where) == 0 {
		return "nothing (removed from the code: 'recurring rm')"
	}
	return strings.Join(where, ", ")
}

// explainUnknownSchedule turns the API's ErrUnknownSchedule for name into
// what 'recurring ls' makes true: a schedule it lists only from the kind
// catalog (a worker publishes it; the store records it at its first tick)
// is refused with what (what to do) instead, exit 1; a name it does not
// list is unknown, with the closest listed name.
func explainUnknownSchedule(ctx context.Context, client *twice.Client, name string, err error, what string) error {
	list, lerr := client.ScheduleList(ctx)
	if lerr != nil {
		return err
	}
	names := make([]string, len(list))
	for i, s := range list {
		if s.Name == name && s.Published {
			return &failure{err: fmt.Errorf("schedule %q is known only from the kind catalog, published by the workers of %s; the store has not recorded it (it has not ticked yet): %s",
				name, s.Kind, what)}
		}
		names[i] = s.Name
	}
	return &usageError{err: fmt.Errorf("%w%s", err, didYouMean(name, names))}
}

func (c *cli) recurringRemoveCommand() *cobra.Command {
	var (
		reason, by string
		force      bool
	)
	cmd := &cobra.Command{
		Use:     "rm NAME",
		Aliases: []string{"remove"},
		Short:   "Remove the record of a schedule removed from the code, and its ticks",
		Long: `Remove the store's record of schedule NAME and its ticks: for a schedule
removed from the code, which would otherwise be listed forever. A schedule
this binary still registers is refused unless --force (its scheduler
records it again at its next tick).`,
		Example: `  twice recurring rm nightly-report --reason "report retired"`,
		Args:    exactArgs(1, "NAME"),
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
			err = client.ScheduleRemove(cmd.Context(), &twice.ScheduleRemoveParams{Name: args[0], By: who, Reason: reason, Force: force})
			if errors.Is(err, twice.ErrUnknownSchedule) {
				return explainUnknownSchedule(cmd.Context(), client, args[0], err,
					"there is no record to remove: it leaves the listing once no worker publishes it (remove it from the code and deploy)")
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "removed schedule %s and its ticks\n", args[0])
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why it is removed")
	cmd.Flags().StringVar(&by, "by", "", "who removes it (default $USER@hostname)")
	cmd.Flags().BoolVar(&force, "force", false, "remove a schedule this binary still registers")
	return cmd
}

func (c *cli) recurringTriggerCommand() *cobra.Command {
	var reason, by, requestID string
	cmd := &cobra.Command{
		Use:   "trigger NAME",
		Short: "Run one tick of a schedule now, once cluster-wide",
		Long: `Enqueue schedule NAME's job now, with its args and options, once
cluster-wide: a retry with the same --request-id enqueues nothing while the
first job is unfinished. Its regular ticks are not touched. The args come
from this binary's registry, or else from the last job the schedule
enqueued: a schedule known only from the kind catalog (it has not ticked
yet) is refused, saying to trigger it from a binary that registers it.`,
		Example: `  twice recurring trigger nightly-report --reason "rerun after the fix"`,
		Args:    exactArgs(1, "NAME"),
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
			res, err := client.ScheduleTrigger(cmd.Context(), &twice.ScheduleTriggerParams{Name: args[0], RequestID: requestID, By: who, Reason: reason})
			if errors.Is(err, twice.ErrUnknownSchedule) {
				return explainUnknownSchedule(cmd.Context(), client, args[0], err,
					"its args are known only to a binary that registers it: trigger it with that binary's CLI (twicecli.Main), or wait for its first tick")
			}
			if err != nil {
				return err
			}
			if res.Duplicate {
				fmt.Fprintf(c.stdout, "already triggered: job %d of request %q is unfinished; nothing enqueued\n", res.Job.ID, requestID)
				return nil
			}
			fmt.Fprintf(c.stdout, "triggered %s: enqueued job %d (%s, queue %s)\n", args[0], res.Job.ID, res.Job.Kind, res.Job.Queue)
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why it is triggered")
	cmd.Flags().StringVar(&by, "by", "", "who triggers it (default $USER@hostname)")
	cmd.Flags().StringVar(&requestID, "request-id", "", "identifies the request: repeating it enqueues no second job while the first is unfinished (default: a new request)")
	return cmd
}
