package cli

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
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
			defer func() { _ = store.Close() }()
			applied, latest, err := store.SchemaVersion(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "%s: schema version %d (this binary's latest: %d)\n", displayDB(c.db), applied, latest)
			return nil
		}),
	}
}

// orphansJSON is what 'orphans --json' prints.
type orphansJSON struct {
	Kinds  []orphanKindJSON    `json:"orphaned_kinds"`
	Queues []strandedQueueJSON `json:"stranded_queues"`
}

type orphanKindJSON struct {
	Kind   string    `json:"kind"`
	Queue  string    `json:"queue"`
	Count  int       `json:"count"`
	Oldest time.Time `json:"oldest"`
}

type strandedQueueJSON struct {
	Queue  string    `json:"queue"`
	Count  int       `json:"count"`
	Oldest time.Time `json:"oldest"`
}

func (c *cli) orphansCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "orphans",
		Short: "List kinds with waiting jobs that no live worker handles, and queues no live worker serves",
		Long: `List kinds with waiting jobs that no live worker handles, and stranded
queues: queues with waiting jobs that no live worker serves (a worker may
know the kind, but none fetches from that queue).

Such jobs are never failed or dropped: they wait until a worker that
registers their kind, or serves their queue, starts.`,
		Args: unknownSubcommand,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			client, done, err := c.openClient(cmd)
			if err != nil {
				return err
			}
			defer done()
			orphans, err := client.Orphans(cmd.Context())
			if err != nil {
				return err
			}
			queues, err := client.StrandedQueues(cmd.Context())
			if err != nil {
				return err
			}
			out := orphansJSON{Kinds: []orphanKindJSON{}, Queues: []strandedQueueJSON{}}
			for _, o := range orphans {
				out.Kinds = append(out.Kinds, orphanKindJSON{Kind: o.Kind, Queue: o.Queue, Count: o.Count, Oldest: o.Oldest})
			}
			for _, q := range queues {
				out.Queues = append(out.Queues, strandedQueueJSON{Queue: q.Queue, Count: q.Count, Oldest: q.Oldest})
			}
			if asJSON {
				return writeJSON(c.stdout, out)
			}
			if len(out.Kinds) == 0 {
				fmt.Fprintln(c.stdout, "no orphaned kinds: every waiting job has a live worker for its kind")
			} else {
				tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "KIND\tQUEUE\tWAITING\tOLDEST")
				for _, o := range out.Kinds {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", terminalText(o.Kind), terminalText(o.Queue), o.Count, formatTime(o.Oldest))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			if len(out.Queues) == 0 {
				fmt.Fprintln(c.stdout, "no stranded queues: every queue with waiting jobs has a live worker serving it")
				return nil
			}
			fmt.Fprintln(c.stdout)
			tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "STRANDED QUEUE\tWAITING\tOLDEST")
			for _, q := range out.Queues {
				fmt.Fprintf(tw, "%s\t%d\t%s\n", terminalText(q.Queue), q.Count, formatTime(q.Oldest))
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
