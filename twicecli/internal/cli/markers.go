package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice"
)

func (c *cli) markersCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "markers",
		Short: "Idempotency markers: look one up, or release it so its effect may run again",
	})
	cmd.AddCommand(c.markersGetCommand(), c.markersReleaseCommand())
	return cmd
}

// markerJSON is one marker as `markers get --json` prints it.
type markerJSON struct {
	Handler     string    `json:"handler"`
	Key         string    `json:"key"`
	ProcessedAt time.Time `json:"processed_at"`
	JobID       int64     `json:"job_id,omitempty"`
	Epoch       int64     `json:"epoch,omitempty"`
}

func (c *cli) markersGetCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get HANDLER KEY",
		Short: "Show whether HANDLER has processed KEY, when, and which job claimed it",
		Args:  exactArgs(2, "HANDLER KEY"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			client, done, err := c.openClient(cmd)
			if err != nil {
				return err
			}
			defer done()
			m, err := client.MarkerGet(cmd.Context(), &twice.MarkerParams{Handler: args[0], Key: args[1]})
			if errors.Is(err, twice.ErrMarkerNotFound) { // the database's state, not bad input
				return &failure{err: fmt.Errorf("handler %q has not processed key %q: there is no marker (a handler's name is its kind unless registered with KindOpts.HandlerName)", args[0], args[1])}
			}
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(c.stdout, markerJSON{Handler: m.Handler, Key: m.Key, ProcessedAt: m.ProcessedAt, JobID: m.JobID, Epoch: m.Epoch})
			}
			fmt.Fprintf(c.stdout, "handler %s processed key %s at %s", terminalText(m.Handler), terminalText(m.Key), m.ProcessedAt.Format(time.RFC3339))
			if m.JobID != 0 {
				fmt.Fprintf(c.stdout, ", claimed by job %d in lease epoch %d", m.JobID, m.Epoch)
			}
			fmt.Fprintln(c.stdout)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (c *cli) markersReleaseCommand() *cobra.Command {
	var by, reason string
	cmd := &cobra.Command{
		Use:   "release HANDLER KEY",
		Short: "Delete HANDLER's marker for KEY, so the next delivery runs the effect again",
		Long: "Delete HANDLER's marker for KEY, so the next delivery of that message runs its effect again.\n\n" +
			"Use it after checking that an effect did NOT happen, typically for a claim-before job dead-lettered\n" +
			"because an earlier delivery claimed its marker and never finished; then retry the job with '" + c.name + " dlq retry'.",
		Args: exactArgs(2, "HANDLER KEY"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			by, err := byFlag(cmd, by)
			if err != nil {
				return err
			}
			client, done, err := c.openClient(cmd)
			if err != nil {
				return err
			}
			defer done()
			p := &twice.MarkerReleaseParams{MarkerParams: twice.MarkerParams{Handler: args[0], Key: args[1]}, By: by, Reason: reason}
			_, err = client.MarkerRelease(cmd.Context(), p)
			if errors.Is(err, twice.ErrMarkerNotFound) { // the database's state, not bad input
				return &failure{err: fmt.Errorf("handler %q has no marker for key %q: nothing to release (check the handler name and key with '%s markers get')", args[0], args[1], c.name)}
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "released handler %s's marker for key %s: the next delivery runs the effect again\n", args[0], args[1])
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, logged with who acted (e.g. the ticket that checked the effect did not happen)")
	cmd.Flags().StringVar(&by, "by", "", "who acts (default $USER@hostname)")
	return cmd
}
