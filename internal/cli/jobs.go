package cli

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// listFlags are the filters and output options of a job listing.
type listFlags struct {
	state, kind, queue string
	limit              int
	before             int64
	json               bool
	showArgs           bool
}

func (l *listFlags) register(cmd *cobra.Command, withState bool) {
	f := cmd.Flags()
	if withState {
		f.StringVar(&l.state, "state", "", "only jobs in this state: available, running, completed, dead or discarded")
	}
	f.StringVar(&l.kind, "kind", "", "only jobs of this kind")
	f.StringVar(&l.queue, "queue", "", "only jobs in this queue")
	f.IntVar(&l.limit, "limit", 50, "list at most this many jobs, newest first")
	f.Int64Var(&l.before, "before", 0, "list only jobs with a smaller id (the next page)")
}

// params checks the flags and turns them into a store listing.
func (l *listFlags) params() (*twicestore.JobListParams, error) {
	state := twicetype.JobState(l.state)
	if state != "" && !state.Valid() {
		return nil, usagef("--state %q: use one of available, running, completed, dead, discarded", l.state)
	}
	if l.limit < 1 {
		return nil, usagef("--limit %d: use a positive number", l.limit)
	}
	if l.before < 0 {
		return nil, usagef("--before %d: use a job id", l.before)
	}
	return &twicestore.JobListParams{
		Filter:   twicestore.JobFilter{State: state, Kind: l.kind, Queue: l.queue},
		BeforeID: l.before,
		Limit:    l.limit,
	}, nil
}

func (c *cli) jobsCommand() *cobra.Command {
	var l listFlags
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "List jobs, newest first; 'jobs show ID' shows one",
		Example: `  twice jobs --state dead --kind email.partner-verification.v1
  twice jobs --limit 20 --before 120
  twice jobs show 42`,
		Args: unknownSubcommand,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			return c.listJobs(cmd, &l)
		}),
	}
	l.register(cmd, true)
	cmd.PersistentFlags().BoolVar(&l.json, "json", false, "print JSON")
	cmd.PersistentFlags().BoolVar(&l.showArgs, "show-args", false, "show the args of kinds neither this binary nor any worker's catalog describes (their sensitive fields cannot be redacted)")
	cmd.AddCommand(c.jobsShowCommand(&l))
	return cmd
}

// listJobs prints one page of jobs as a table or JSON.
func (c *cli) listJobs(cmd *cobra.Command, l *listFlags) error {
	p, err := l.params()
	if err != nil {
		return err
	}
	store, err := c.openStore(cmd.Context(), false)
	if err != nil {
		return err
	}
	defer store.Close()
	res, err := store.JobList(cmd.Context(), p)
	if err != nil {
		return err
	}
	now := time.Now()
	if l.json {
		return writeJSON(c.stdout, c.newKindBook(l.showArgs).jobsJSON(res.Jobs, now))
	}
	if len(res.Jobs) == 0 {
		fmt.Fprintln(c.stdout, "no jobs match")
		return nil
	}
	printJobTable(c.stdout, res.Jobs, now)
	if len(res.Jobs) == p.Limit {
		fmt.Fprintf(c.stderr, "more may follow: add --before %d\n", res.Jobs[len(res.Jobs)-1].ID)
	}
	return nil
}

func (c *cli) jobsShowCommand(l *listFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show a job: envelope, args (sensitive fields redacted) and every attempt's error",
		Args:  exactArgs(1, "the job ID"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			id, err := parseID(args[0])
			if err != nil {
				return err
			}
			store, err := c.openStore(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer store.Close()
			job, err := store.JobGet(cmd.Context(), &twicestore.JobGetParams{ID: id})
			if errors.Is(err, twicestore.ErrNotFound) {
				return fmt.Errorf("job %d does not exist", id)
			}
			if err != nil {
				return err
			}
			book := c.newKindBook(l.showArgs)
			if l.json {
				return writeJSON(c.stdout, book.newJobJSON(job, true, time.Now()))
			}
			book.printJob(c.stdout, job, time.Now())
			return nil
		}),
	}
}

func parseID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 {
		return 0, usagef("%q is not a job id: use a positive integer", s)
	}
	return id, nil
}
