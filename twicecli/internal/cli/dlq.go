package cli

import (
	"github.com/spf13/cobra"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicetype"
)

func (c *cli) dlqCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "dlq",
		Short: "The dead-letter queue: list, retry or discard dead jobs",
	})
	retry := c.jobActionCommand(retryJobAction)
	retry.Short = "Put dead jobs back in their queue with their attempts reset and their error history kept (as 'jobs retry')"
	retry.Example = `  twice dlq retry 42 43
  twice dlq retry --all --kind email.partner-verification.v1`
	retry.Flags().Bool("json", false, "print JSON")
	discard := c.jobActionCommand(discardAction)
	discard.Example = `  twice dlq discard 42 43 --reason "refunded by hand"
  twice dlq discard --all --kind email.partner-verification.v1`
	discard.Flags().Bool("json", false, "print JSON")
	cmd.AddCommand(c.dlqListCommand(), retry, discard)
	return cmd
}

func (c *cli) dlqListCommand() *cobra.Command {
	var l listFlags
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List dead jobs, newest first",
		Args:    unknownSubcommand,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			l.state = string(twicetype.JobStateDead)
			return c.listJobs(cmd, &l)
		}),
	}
	l.register(cmd, false)
	cmd.Flags().BoolVar(&l.json, "json", false, "print JSON")
	cmd.Flags().BoolVar(&l.showArgs, "show-args", false, "show the args of kinds neither this binary nor any worker's catalog describes")
	return cmd
}

// discardAction marks dead jobs discarded through the admin API.
var discardAction = jobAction{
	name: "discard", done: "discarded",
	short: "Mark dead jobs discarded: kept for the record, never retried by a bulk retry",
	long: `Mark dead jobs discarded: kept for the record until their retention ends,
never retried by 'dlq retry --all' (a retry by id still brings one back). A
job in another state is refused with its state; the others are discarded
all the same, each with its own result line.`,
	apply:     (*twice.Client).JobDiscard,
	allStates: []twicetype.JobState{twicetype.JobStateDead},
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
