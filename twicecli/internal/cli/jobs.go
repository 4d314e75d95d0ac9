package cli

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicetype"
)

// listFlags are the filters and output options of a job listing.
type listFlags struct {
	state, kind, queue, node string
	due, scheduled           bool
	limit                    int
	before                   int64
	json                     bool
	showArgs                 bool
	search                   searchFlags
}

// stateNames lists the job states for messages.
func stateNames() string {
	s := ""
	for i, st := range twicetype.AllJobStates {
		if i > 0 {
			s += ", "
		}
		s += string(st)
	}
	return s
}

// registerFilters adds the flags that select jobs: a listing's, and an
// action's with --all.
func (l *listFlags) registerFilters(cmd *cobra.Command, withState bool) {
	f := cmd.Flags()
	if withState {
		f.StringVar(&l.state, "state", "", "only jobs in this state: "+stateNames())
	}
	f.StringVar(&l.kind, "kind", "", "only jobs of this kind")
	f.StringVar(&l.queue, "queue", "", "only jobs in this queue")
	f.StringVar(&l.node, "node", "", "only jobs this node runs, or last ran")
	f.BoolVar(&l.due, "due", false, "only available jobs due now")
	f.BoolVar(&l.scheduled, "scheduled", false, "only available jobs due later (delays, backoffs, snoozes)")
	l.search.register(cmd)
}

func (l *listFlags) register(cmd *cobra.Command, withState bool) {
	l.registerFilters(cmd, withState)
	f := cmd.Flags()
	f.IntVar(&l.limit, "limit", 50, fmt.Sprintf("list at most this many jobs, newest first (at most %d)", twice.JobListLimitMax))
	f.Int64Var(&l.before, "before", 0, "list only jobs with a smaller id (the next page)")
}

// filter checks the filter flags and turns them into the admin API's.
func (l *listFlags) filter() (*twice.JobFilter, error) {
	state := twicetype.JobState(l.state)
	if state != "" && !state.Valid() {
		return nil, usagef("--state %q: use one of %s", l.state, stateNames())
	}
	f := &twice.JobFilter{State: state, Kind: l.kind, Queue: l.queue, Node: l.node}
	if err := l.search.apply(f); err != nil {
		return nil, err
	}
	switch {
	case l.due && l.scheduled:
		return nil, usagef("--due and --scheduled exclude each other: give one, or neither for both")
	case l.due:
		f.Timing = twice.JobDue
	case l.scheduled:
		f.Timing = twice.JobScheduled
	}
	if f.Timing != "" && state != "" && state != twicetype.JobStateAvailable {
		return nil, usagef("--%s applies to available jobs, not to --state %s", f.Timing, state)
	}
	return f, nil
}

// params checks the flags and turns them into a listing.
func (l *listFlags) params() (*twice.JobListParams, error) {
	f, err := l.filter()
	if err != nil {
		return nil, err
	}
	if l.limit < 1 || l.limit > twice.JobListLimitMax {
		return nil, usagef("--limit %d: use a number from 1 to %d", l.limit, twice.JobListLimitMax)
	}
	if l.before < 0 {
		return nil, usagef("--before %d: use a job id", l.before)
	}
	return &twice.JobListParams{JobFilter: *f, BeforeID: l.before, Limit: l.limit}, nil
}

func (c *cli) jobsCommand() *cobra.Command {
	var l listFlags
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "List jobs, newest first; show, cancel, delete, retry, run now or signal them",
		Long: `List jobs, newest first. A job waiting for a later run time shows as
scheduled, apart from the available jobs that are due; a listing shows only
the first line of a job's last error ('jobs show' shows every attempt's).

A --kind or --queue that names no known kind or queue (no worker
published it, this binary does not register it, no job has it) is a usage
error naming the closest known one, not an empty listing.

Args of a kind that neither this binary registers nor any worker has
published to the catalog are hidden (their sensitive fields cannot be
known) unless --show-args is given; sensitive fields of known kinds are
always redacted.`,
		Example: `  twice jobs --state dead --kind email.partner-verification.v1
  twice jobs --scheduled --queue bulk
  twice jobs --limit 20 --before 120 --json
  twice jobs --correlation-id 5f0c2a7e --meta tenant=acme
  twice jobs show 42`,
		Args: unknownSubcommand,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			return c.listJobs(cmd, &l)
		}),
	}
	l.register(cmd, true)
	cmd.PersistentFlags().BoolVar(&l.json, "json", false, "print JSON")
	cmd.PersistentFlags().BoolVar(&l.showArgs, "show-args", false, "show the args of kinds neither this binary nor any worker's catalog describes (their sensitive fields cannot be redacted)")
	cmd.AddCommand(c.jobsShowCommand(&l), c.jobActionCommand(cancelAction), c.jobActionCommand(deleteAction), c.jobActionCommand(retryJobAction), c.jobActionCommand(runNowAction),
		c.jobsSignalCommand())
	return cmd
}

// listJobs prints one page of jobs as a table or JSON.
func (c *cli) listJobs(cmd *cobra.Command, l *listFlags) error {
	p, err := l.params()
	if err != nil {
		return err
	}
	client, done, err := c.openClient(cmd)
	if err != nil {
		return err
	}
	defer done()
	res, err := client.JobList(cmd.Context(), p)
	if err != nil {
		return err
	}
	now := time.Now()
	book, err := c.loadKindBook(cmd.Context(), client, l.showArgs)
	if err != nil {
		return err
	}
	if err := book.loadWhy(cmd.Context(), client, res.Jobs); err != nil {
		return err
	}
	if len(res.Jobs) == 0 && p.BeforeID == 0 {
		if err := checkFilterNames(cmd.Context(), client, &p.JobFilter); err != nil {
			return err
		}
	}
	if l.json {
		return writeJSON(c.stdout, book.jobsJSON(res.Jobs, now))
	}
	if len(res.Jobs) == 0 {
		fmt.Fprintln(c.stdout, "no jobs match")
		return nil
	}
	if err := book.printJobTable(c.stdout, res.Jobs, now); err != nil {
		return err
	}
	if res.Next != 0 {
		fmt.Fprintf(c.stderr, "more may follow: add --before %d\n", res.Next)
	}
	return nil
}

func (c *cli) jobsShowCommand(l *listFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show a job: envelope, args (sensitive fields redacted), every attempt's error, and its output, steps, batch, workflow and children",
		Args:  exactArgs(1, "the job ID"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			id, err := parseID(args[0])
			if err != nil {
				return err
			}
			client, done, err := c.openClient(cmd)
			if err != nil {
				return err
			}
			defer done()
			detail, err := client.JobDetail(cmd.Context(), id)
			if err != nil {
				return err
			}
			job := detail.Job
			book, err := c.loadKindBook(cmd.Context(), client, l.showArgs)
			if err != nil {
				return err
			}
			if err := book.loadWhy(cmd.Context(), client, []*twicetype.JobRow{job}); err != nil {
				return err
			}
			if l.json {
				return writeJSON(c.stdout, book.newJobDetailJSON(detail, time.Now()))
			}
			if err := book.printJob(c.stdout, job, time.Now()); err != nil {
				return err
			}
			return printJobDetail(c.stdout, detail)
		}),
	}
}

// checkFilterNames refuses, once a filter matched nothing, a --kind or
// --queue that names nothing known, as a typo (exit 2, with the closest
// known name) rather than "no jobs match": a kind no worker published,
// this binary does not register and no job carries; a queue no kind goes
// to, no worker serves and no job is in.
func checkFilterNames(ctx context.Context, client *twice.Client, f *twice.JobFilter) error {
	if f.Kind != "" {
		kinds, err := client.Catalog(ctx)
		if err != nil {
			return err
		}
		names := make([]string, len(kinds))
		for i, k := range kinds {
			names[i] = k.Kind
		}
		if !slices.Contains(names, f.Kind) {
			// A kind only jobs carry (its workers predate the catalog) is
			// no typo.
			res, err := client.JobList(ctx, &twice.JobListParams{JobFilter: twice.JobFilter{Kind: f.Kind}, Limit: 1})
			if err != nil {
				return err
			}
			if len(res.Jobs) == 0 {
				return usagef("--kind %q: no such kind: no worker published it, this binary does not register it and no job has it%s",
					f.Kind, didYouMean(f.Kind, names))
			}
		}
	}
	if f.Queue != "" {
		queues, err := client.QueueList(ctx)
		if err != nil {
			return err
		}
		names := make([]string, len(queues))
		for i, q := range queues {
			names[i] = q.Name
		}
		if !slices.Contains(names, f.Queue) {
			return usagef("--queue %q: no such queue: no kind goes to it, no worker serves it and no job is in it%s",
				f.Queue, didYouMean(f.Queue, names))
		}
	}
	return nil
}

func parseID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 {
		return 0, usagef("%q is not a job id: use a positive integer", s)
	}
	return id, nil
}
