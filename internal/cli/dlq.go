package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice/twicestore"
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
	cmd.AddCommand(c.dlqListCommand(), retry, c.dlqActionCommand(discardAction))
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

// dlqAction is retry or discard.
type dlqAction struct {
	name, done, short string
	// apply is the store's bulk action.
	apply func(twicestore.Executor, context.Context, *twicestore.JobBulkParams) (*twicestore.JobBulkResult, error)
	// eligible are the states an explicitly named job may be in.
	eligible []twicetype.JobState
}

var (
	discardAction = dlqAction{
		name: "discard", done: "discarded",
		short:    "Mark dead jobs discarded: kept for the record, never retried",
		apply:    twicestore.Executor.JobDiscard,
		eligible: []twicetype.JobState{twicetype.JobStateDead},
	}
)

func (c *cli) dlqActionCommand(act dlqAction) *cobra.Command {
	var (
		all         bool
		kind, queue string
	)
	cmd := &cobra.Command{
		Use:   act.name + " ID... | --all [--kind K] [--queue Q]",
		Short: act.short,
		Example: fmt.Sprintf(`  twice dlq %[1]s 42 43
  twice dlq %[1]s --all --kind email.partner-verification.v1`, act.name),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			switch {
			case all && len(args) > 0:
				return usagef("give job IDs or --all, not both")
			case !all && len(args) == 0:
				return usagef("give the IDs of the jobs to %s, or --all (narrowed with --kind and --queue)", act.name)
			}
			filter := twicestore.JobFilter{Kind: kind, Queue: queue}
			if all {
				// In bulk only dead jobs: a discarded one comes back only by name.
				filter.State = twicetype.JobStateDead
			}
			for _, a := range args {
				id, err := parseID(a)
				if err != nil {
					return err
				}
				filter.IDs = append(filter.IDs, id)
			}
			store, err := c.openStore(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer func() { _ = store.Close() }()
			res, err := act.apply(store, cmd.Context(), &twicestore.JobBulkParams{Filter: filter, Now: time.Now()})
			if err != nil {
				return err
			}
			switch {
			case len(res.IDs) > 0:
				fmt.Fprintf(c.stdout, "%s %d %s: %s\n", act.done, len(res.IDs), plural(len(res.IDs), "job", "jobs"), joinIDs(res.IDs))
			case all:
				fmt.Fprintln(c.stdout, "no dead jobs match")
			}
			return c.explainSkipped(cmd, store, act, filter.IDs, res.IDs)
		}),
	}
	cmd.Flags().BoolVar(&all, "all", false, "every dead job (narrowed by --kind and --queue)")
	cmd.Flags().StringVar(&kind, "kind", "", "only jobs of this kind")
	cmd.Flags().StringVar(&queue, "queue", "", "only jobs in this queue")
	return cmd
}

// explainSkipped fails, saying why, when jobs named by id were left alone.
func (c *cli) explainSkipped(cmd *cobra.Command, store twicestore.Store, act dlqAction, asked, changed []int64) error {
	done := map[int64]bool{}
	for _, id := range changed {
		done[id] = true
	}
	var reasons []string
	for _, id := range asked {
		if done[id] {
			continue
		}
		job, err := store.JobGet(cmd.Context(), &twicestore.JobGetParams{ID: id})
		switch {
		case errors.Is(err, twicestore.ErrNotFound):
			reasons = append(reasons, fmt.Sprintf("job %d does not exist", id))
		case err != nil:
			return err
		case !slices.Contains(act.eligible, job.State):
			reasons = append(reasons, fmt.Sprintf("job %d is %s, not dead", id, job.State))
		default:
			reasons = append(reasons, fmt.Sprintf("job %d (%s, %s) does not match --kind/--queue", id, job.Kind, job.Queue))
		}
	}
	if len(reasons) == 0 {
		return nil
	}
	return fmt.Errorf("could not %s %d of the jobs named: %s", act.name, len(reasons), strings.Join(reasons, "; "))
}

func joinIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
