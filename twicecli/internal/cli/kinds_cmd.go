package cli

import "github.com/spf13/cobra"

// kindsCommand groups the commands about job kinds as a deploy sees
// them: whether a binary's args still read the jobs that wait, and
// whether a kind version can be removed.
func (c *cli) kindsCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "kinds",
		Short: "Job kinds across deploys: check args against the jobs that wait, drain a version before removing it",
	})
	cmd.AddCommand(c.kindsCheckCommand(), c.kindsDrainCommand(), c.kindsSchemaCommand())
	return cmd
}
