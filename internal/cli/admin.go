package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice"
)

func (c *cli) migrateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Create the database or apply the migrations it lacks, and print its schema version",
		Args:  unknownSubcommand,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			// Open applies the pending migrations, idempotently, and
			// refuses a database migrated by a newer twice.
			store, err := c.openStore(cmd.Context(), true)
			if err != nil {
				return err
			}
			defer store.Close()
			applied, latest, err := store.SchemaVersion(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "%s: schema version %d (this binary's latest: %d)\n", displayDB(c.db), applied, latest)
			return nil
		}),
	}
}

func (c *cli) orphansCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "orphans",
		Short: "List kinds with waiting jobs that no live worker handles",
		Long: `List kinds with waiting jobs that no live worker handles.

Such jobs are never failed or dropped: they wait until a worker that
registers their kind starts.`,
		Args: unknownSubcommand,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			store, err := c.openStore(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer store.Close()
			client, err := twice.NewClient(store, twice.Config{})
			if err != nil {
				return err
			}
			orphans, err := client.Orphans(cmd.Context())
			if err != nil {
				return err
			}
			if len(orphans) == 0 {
				fmt.Fprintln(c.stdout, "no orphaned kinds: every waiting job has a live worker for its kind")
				return nil
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "KIND\tQUEUE\tWAITING\tOLDEST")
			for _, o := range orphans {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", o.Kind, o.Queue, o.Count, formatTime(o.Oldest))
			}
			return tw.Flush()
		}),
	}
}
