package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicetype"
)

// jobAction is cancel, delete or retry through the admin API.
type jobAction struct {
	name, done  string
	short, long string
	example     string
	apply       func(*twice.Client, context.Context, *twice.JobActionParams) (*twice.JobActionResult, error)
	// allStates are the states --all covers without --state; none means
	// --all needs --state.
	allStates []twicetype.JobState
}

var (
	cancelAction = jobAction{
		name: "cancel", done: "cancelled",
		short: "Cancel jobs: waiting ones at once, running ones through their node; never retried",
		long: `Cancel jobs. A job waiting to run (due or scheduled) ends cancelled at
once, with who and why recorded on it. A running job gets a cancel
request: the node running it cancels the handler's context (at once on
PostgreSQL, within about half a second on SQLite and MySQL) and the job ends
cancelled, never retried, unless it finishes first. A finished job is left
alone. Each job gets its own result line; one refusal never stops the
others.

With --all it cancels every available and running job the filters select
(--state narrows it to one of them).`,
		example: `  twice jobs cancel 42 43 --reason "customer withdrew the order"
  twice jobs cancel --all --kind invoice.send.v1 --scheduled --reason "incident 7"`,
		apply:     (*twice.Client).JobCancel,
		allStates: []twicetype.JobState{twicetype.JobStateAvailable, twicetype.JobStateRunning},
	}
	deleteAction = jobAction{
		name: "delete", done: "deleted",
		short: "Delete jobs that are not running, whatever their state",
		long: `Delete jobs that are not running, whatever their state; a running job is
refused: cancel it first. Deleted jobs are gone, with their error history.

With --all it deletes every job the filters select, and needs --state, so
a forgotten filter never deletes every job.`,
		example: `  twice jobs delete 42
  twice jobs delete --all --state cancelled --kind invoice.send.v1`,
		apply: (*twice.Client).JobDelete,
	}
	retryJobAction = jobAction{
		name: "retry", done: "retried",
		short: "Make dead, discarded or cancelled jobs available again (completed ones with --state completed), history kept",
		long: `Make dead, discarded or cancelled jobs available again, with their attempts
reset and their error history kept. A running or waiting job is refused,
as is one whose unique key another job of its kind holds; the others are
retried all the same, each with its own result line.

With --all it retries every dead job the filters select (--state
discarded or cancelled for those).

Completed jobs are replayed only with --state completed (with --all, or
with their ids): a job that succeeded never runs again by accident. A
completed workflow task or batch member is refused even then: its
completion released its dependents or counted in its batch already.

--dry-run changes nothing: it classifies each job the retry would take and
prints the count and a sample of ids per class: no-op (its marker exists,
so the replay calls no effect), will-run (no marker: the effect happens
again), uncertain (its own claim-before claim, or a step claimed without a
receipt: the effect may have happened), blocked (another job holds its
unique key) and refused (a completed workflow task or batch member). The
real retry does what the dry run says: it skips the uncertain jobs, each
with a line saying how to settle it, unless --force with a --reason,
recorded in each forced job's history with who.`,
		example: `  twice jobs retry 42 43
  twice jobs retry --all --state cancelled --kind invoice.send.v1
  twice jobs retry --all --kind invoice.send.v1 --dry-run
  twice jobs retry --all --state completed --kind email.welcome.v1 --dry-run
  twice jobs retry 42 --force --reason "checked the provider: no charge"`,
		apply:     (*twice.Client).JobRetry,
		allStates: []twicetype.JobState{twicetype.JobStateDead},
	}
	runNowAction = jobAction{
		name: "run-now", done: "due now",
		short: "Make scheduled jobs, and retries waiting out their backoff, due now",
		long: `Make jobs waiting for a later run time due now: a scheduled job, or a
retry waiting out its backoff, runs at the next fetch, its attempts as
they are. A job already due is done too. A running, finished or waiting
job (parked on a signal: send it with 'jobs signal' instead) is refused;
the others run now all the same, each with its own result line.

With --all it makes every available job the filters select due now
(--scheduled for only those not due yet).`,
		example: `  twice jobs run-now 42 --reason "customer is on the phone"
  twice jobs run-now --all --kind invoice.send.v1 --scheduled --reason "incident 7 fixed"`,
		apply:     (*twice.Client).JobRunNow,
		allStates: []twicetype.JobState{twicetype.JobStateAvailable},
	}
)

// jobActionFlags are what an action command is given beside the ids.
type jobActionFlags struct {
	listFlags
	all        bool
	reason, by string
	// dryRun and force are retry's: preview the classes, or retry the
	// uncertain jobs too.
	dryRun, force bool
}

func (c *cli) jobActionCommand(act jobAction) *cobra.Command {
	var f jobActionFlags
	cmd := &cobra.Command{
		Use:     act.name + " ID... | --all [filters]",
		Short:   act.short,
		Long:    act.long,
		Example: act.example,
		RunE: run(func(cmd *cobra.Command, args []string) error {
			return c.runJobAction(cmd, act, &f, args)
		}),
	}
	f.registerFilters(cmd, true)
	fl := cmd.Flags()
	fl.BoolVar(&f.all, "all", false, "every job the filters select")
	fl.StringVar(&f.reason, "reason", "", "why, recorded and logged with who acted")
	fl.StringVar(&f.by, "by", "", "who acts (default $USER@hostname)")
	if act.name == retryJobAction.name {
		fl.BoolVar(&f.dryRun, "dry-run", false, "print what the retry would do to each class of job (no-op, will-run, uncertain, blocked, refused); change nothing")
		fl.BoolVar(&f.force, "force", false, "retry jobs whose effect is uncertain too (needs --reason)")
	}
	return cmd
}

// runJobAction checks the selection, applies the action and prints one line
// per job it changed. Jobs it refused are named, with the reason, in the
// error (exit 1): its state refused it, or no job has its id.
func (c *cli) runJobAction(cmd *cobra.Command, act jobAction, f *jobActionFlags, args []string) error {
	switch {
	case f.all && len(args) > 0:
		return usagef("give job IDs or --all, not both")
	case !f.all && len(args) == 0:
		return usagef("give the IDs of the jobs to %s, or --all (narrowed with --state, --kind, --queue, --node, --due or --scheduled)", act.name)
	}
	if f.force && strings.TrimSpace(f.reason) == "" {
		return usagef("--force needs --reason: say why jobs whose effect may have happened should run again")
	}
	by, err := byFlag(cmd, f.by)
	if err != nil {
		return err
	}
	ids := make([]int64, 0, len(args))
	for _, a := range args {
		id, err := parseID(a)
		if err != nil {
			return err
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	filter, err := f.filter()
	if err != nil {
		return err
	}
	states := []twicetype.JobState{filter.State}
	if f.all && filter.State == "" {
		if len(act.allStates) == 0 {
			return usagef("%s --all needs --state, so a forgotten filter never %s every job", act.name, act.done)
		}
		states = act.allStates
		if filter.Timing != "" {
			states = []twicetype.JobState{twicetype.JobStateAvailable} // due or scheduled: available jobs only
		}
	}
	narrowed := narrows(filter)
	client, done, err := c.openClient(cmd)
	if err != nil {
		return err
	}
	defer done()
	asJSON, _ := cmd.Flags().GetBool("json") // the jobs command's persistent flag
	var (
		results  []twice.JobResult
		previews []*twice.RetryPreview
	)
	for _, st := range states {
		p := &twice.JobActionParams{IDs: ids, By: by, Reason: f.reason, Force: f.force}
		if f.all || narrowed {
			sf := *filter
			sf.State = st
			p.Filter = &sf
		}
		if f.dryRun {
			pv, err := client.JobRetryPreview(cmd.Context(), p)
			if err != nil {
				return err
			}
			previews = append(previews, pv)
			continue
		}
		res, err := act.apply(client, cmd.Context(), p)
		if err != nil {
			return err
		}
		results = append(results, res.Jobs...)
	}
	if narrowed && !f.all {
		// An id the filters left out reads as not found: say which.
		for i, r := range results {
			if errors.Is(r.Err, twice.ErrJobNotFound) {
				if j, err := client.JobGet(cmd.Context(), r.ID); err == nil {
					results[i].Err = fmt.Errorf("job %d (%s, queue %s, %s) does not match the filters", j.ID, j.Kind, j.Queue, j.State)
				}
			}
		}
	}
	if f.dryRun {
		pv := mergePreviews(previews)
		if pv.Total == 0 && f.all {
			return noMatch(cmd, client, filter, "a retry would change nothing")
		}
		return c.printRetryPreview(pv, asJSON)
	}
	if len(results) == 0 && f.all {
		return noMatch(cmd, client, filter, "nothing changed")
	}
	slices.SortFunc(results, func(a, b twice.JobResult) int { return cmp.Compare(a.ID, b.ID) })
	return c.printJobResults(act, results, ids, asJSON)
}

// noMatch is the error of an --all whose filters select no job: a
// misspelt name says so (checkFilterNames), and otherwise the filters are
// bad input all the same, since the action they name did nothing.
func noMatch(cmd *cobra.Command, client *twice.Client, filter *twice.JobFilter, outcome string) error {
	if err := checkFilterNames(cmd.Context(), client, filter); err != nil {
		return err
	}
	list := cmd.Root().Name() + " jobs"
	if cmd.Parent() != nil && cmd.Parent().Name() == "dlq" {
		list = cmd.Root().Name() + " dlq ls"
	}
	return usagef("no jobs match the filters, so %s: list them with '%s' and the same filters to check them", outcome, list)
}

// mergePreviews adds up the previews of the states --all retries.
func mergePreviews(ps []*twice.RetryPreview) *twice.RetryPreview {
	out := &twice.RetryPreview{Counts: map[twice.ReplayClass]int{}, Samples: map[twice.ReplayClass][]int64{}}
	for _, p := range ps {
		out.Total += p.Total
		out.Completed += p.Completed
		out.Forced = p.Forced
		for cl, n := range p.Counts {
			out.Counts[cl] += n
		}
		for cl, ids := range p.Samples {
			out.Samples[cl] = append(out.Samples[cl], ids...)
		}
	}
	for cl, ids := range out.Samples {
		slices.Sort(ids)
		out.Samples[cl] = ids[:min(len(ids), twice.RetryPreviewSamples)]
	}
	return out
}

// replayClassHelp says what each class means for the operator, and what to
// do about it.
var replayClassHelp = map[twice.ReplayClass]string{
	twice.ReplayNoop:      "its marker exists: the replay completes without calling the effect",
	twice.ReplayWillRun:   "no marker: the effect happens again",
	twice.ReplayUncertain: "the effect may have happened: skipped; settle it first (twice markers release, a step's settle) or --force --reason",
	twice.ReplayBlocked:   "another job holds its unique key: the retry leaves it",
	twice.ReplayRefused:   "a completed workflow task or batch member: the retry leaves it; enqueue its work anew",
}

// retryPreviewJSON is a dry run with --json.
type retryPreviewJSON struct {
	Total     int                   `json:"total"`
	Completed int                   `json:"completed,omitempty"`
	Classes   []retryPreviewClassJS `json:"classes"`
}

type retryPreviewClassJS struct {
	Class  string  `json:"class"`
	Count  int     `json:"count"`
	Sample []int64 `json:"sample"`
}

// printRetryPreview prints a dry run's counts and samples per class, and
// says that nothing changed.
func (c *cli) printRetryPreview(pv *twice.RetryPreview, asJSON bool) error {
	if asJSON {
		out := retryPreviewJSON{Total: pv.Total, Completed: pv.Completed, Classes: []retryPreviewClassJS{}}
		for _, cl := range twice.ReplayClasses {
			out.Classes = append(out.Classes, retryPreviewClassJS{Class: string(cl), Count: pv.Counts[cl], Sample: append([]int64{}, pv.Samples[cl]...)})
		}
		return writeJSON(c.stdout, out)
	}
	if pv.Total == 0 {
		fmt.Fprintln(c.stdout, "no jobs match: a retry would change nothing")
		return nil
	}
	fmt.Fprintf(c.stdout, "a retry would take %d jobs (dry run: nothing changed):\n", pv.Total)
	for _, cl := range twice.ReplayClasses {
		if cl == twice.ReplayRefused && pv.Counts[cl] == 0 {
			continue // only completed jobs are refused: no line for the others
		}
		line := fmt.Sprintf("  %-9s %7d  %s", cl, pv.Counts[cl], replayClassHelp[cl])
		if cl == twice.ReplayUncertain && pv.Forced {
			line = fmt.Sprintf("  %-9s %7d  %s", cl, pv.Counts[cl], "the effect may have happened: retried anyway (--force)")
		}
		if ids := pv.Samples[cl]; len(ids) > 0 {
			s := make([]string, len(ids))
			for i, id := range ids {
				s[i] = strconv.FormatInt(id, 10)
			}
			more := ""
			if pv.Counts[cl] > len(ids) {
				more = ", …"
			}
			line += " (jobs " + strings.Join(s, ", ") + more + ")"
		}
		fmt.Fprintln(c.stdout, line)
	}
	if pv.Completed > 0 {
		fmt.Fprintf(c.stdout, "%d of them are completed: the same command without --dry-run replays them as classed above\n", pv.Completed)
	}
	return nil
}

// jobResultJSON is one job's result with --json.
type jobResultJSON struct {
	ID              int64  `json:"id"`
	State           string `json:"state,omitempty"`
	Changed         bool   `json:"changed"`
	CancelRequested bool   `json:"cancel_requested,omitempty"`
	Error           string `json:"error,omitempty"`
}

// printJobResults prints a line (or a JSON entry) per job and returns the
// error naming the jobs left alone, if any.
func (c *cli) printJobResults(act jobAction, results []twice.JobResult, asked []int64, asJSON bool) error {
	var (
		refused  []string
		out      []jobResultJSON
		notFound int
	)
	seen := map[int64]bool{}
	for _, r := range results {
		seen[r.ID] = true
		j := jobResultJSON{ID: r.ID, State: string(r.State), Changed: r.Changed, CancelRequested: r.CancelRequested}
		if r.Err != nil {
			j.Error = r.Err.Error()
			refused = append(refused, r.Err.Error())
			if errors.Is(r.Err, twice.ErrJobNotFound) {
				notFound++
			}
		}
		out = append(out, j)
		if asJSON || !r.Changed {
			continue
		}
		switch {
		case r.CancelRequested:
			fmt.Fprintf(c.stdout, "job %d: cancel requested: it is running, and ends cancelled unless it finishes first\n", r.ID)
		default:
			fmt.Fprintf(c.stdout, "job %d: %s\n", r.ID, act.done)
		}
	}
	for _, id := range asked {
		if !seen[id] {
			msg := fmt.Sprintf("job %d does not match the filters", id)
			refused = append(refused, msg)
			out = append(out, jobResultJSON{ID: id, Error: msg})
		}
	}
	if asJSON {
		if out == nil {
			out = []jobResultJSON{}
		}
		if err := writeJSON(c.stdout, out); err != nil {
			return err
		}
	} else if len(results) == 0 && len(asked) == 0 {
		fmt.Fprintln(c.stdout, "no jobs match")
	}
	if len(refused) == 0 {
		return nil
	}
	err := fmt.Errorf("could not %s %d of the jobs: %s", act.name, len(refused), strings.Join(refused, "; "))
	if notFound == len(results) && len(results) > 0 && len(results) == len(refused) {
		// Every id named no job: bad input, as ErrJobNotFound is (exit 2).
		return &usageError{err: err}
	}
	return &failure{err: err}
}

// byFlag is --by, or $USER@hostname when it is not given.
func byFlag(cmd *cobra.Command, by string) (string, error) {
	if !cmd.Flags().Changed("by") {
		return defaultBy(), nil
	}
	if strings.TrimSpace(by) == "" {
		return "", usagef("--by is empty: name who acts, or leave it out for %s", defaultBy())
	}
	return by, nil
}
