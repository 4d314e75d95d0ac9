package cli

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice/twicestore"
)

func (c *cli) recurringCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "recurring",
		Short: "Recurring schedules: their last tick, its outcome and the next run",
	})
	var asJSON bool
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the schedules every node's scheduler has recorded",
		Long: `List the recurring schedules the schedulers have recorded: each one's spec,
its last tick and what became of it (enqueued, with the job id, or skipped
because its kind was switched off), and its next run. A schedule appears
once a scheduler has recorded its first tick.`,
		Args: unknownSubcommand,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			store, err := c.openStore(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer store.Close()
			res, err := store.ScheduleList(cmd.Context(), &twicestore.ScheduleListParams{})
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(c.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(res.Schedules)
			}
			if len(res.Schedules) == 0 {
				fmt.Fprintln(c.stdout, "no schedule has ticked yet")
				return nil
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tKIND\tSPEC\tLAST TICK\tOUTCOME\tJOB\tNEXT RUN")
			for _, s := range res.Schedules {
				job := "-"
				if s.LastJobID != 0 {
					job = fmt.Sprint(s.LastJobID)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Kind, s.Spec,
					formatTime(s.LastTickAt), s.LastOutcome, job, formatTime(s.NextAt))
			}
			return tw.Flush()
		}),
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(ls)
	return cmd
}
