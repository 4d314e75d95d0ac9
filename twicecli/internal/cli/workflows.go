package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

func (c *cli) workflowsCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "workflows",
		Short: "Workflows: graphs of jobs, each task enqueued when its dependencies completed",
	})
	cmd.AddCommand(c.workflowsListCommand(), c.workflowsShowCommand(), c.workflowsCancelCommand())
	return cmd
}

// workflowJSON is one workflow as 'workflows ls --json' prints it.
type workflowJSON struct {
	ID         int64      `json:"id"`
	Name       string     `json:"name"`
	State      string     `json:"state"`
	Blocked    bool       `json:"blocked"`
	OnDead     string     `json:"on_dead"`
	Tasks      int        `json:"tasks"`
	Completed  int        `json:"completed"`
	Dead       int        `json:"dead"`
	CreatedAt  time.Time  `json:"created_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

func newWorkflowJSON(w *twicetype.Workflow) workflowJSON {
	return workflowJSON{ID: w.ID, Name: w.Name, State: string(w.State), Blocked: w.Blocked(), OnDead: w.OnDead,
		Tasks: w.Tasks, Completed: w.Completed, Dead: w.Dead, CreatedAt: w.CreatedAt, FinishedAt: timePtr(w.FinishedAt)}
}

// workflowState is the state a person reads: running, blocked (a dead
// task holds it), or the stored one.
func workflowState(w *twicetype.Workflow) string {
	if w.Blocked() {
		return "blocked"
	}
	return string(w.State)
}

func (c *cli) workflowsListCommand() *cobra.Command {
	var (
		asJSON bool
		state  string
		limit  int
		before int64
	)
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List workflows, newest first: state, tasks completed, dead tasks",
		Example: `  twice workflows ls --state running
  twice workflows ls --limit 20 --before 120`,
		Args: unknownSubcommand,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			switch twicetype.WorkflowState(state) {
			case "", twicetype.WorkflowRunning, twicetype.WorkflowCompleted, twicetype.WorkflowFailed, twicetype.WorkflowCancelled:
			default:
				return usagef("--state %q: use running, completed, failed or cancelled", state)
			}
			if limit < 1 || limit > twice.JobListLimitMax {
				return usagef("--limit %d: use a number from 1 to %d", limit, twice.JobListLimitMax)
			}
			if before < 0 {
				return usagef("--before %d: use a workflow id", before)
			}
			// One more than the limit tells whether an older page follows.
			opts := &twice.WorkflowListOpts{State: twicetype.WorkflowState(state), Before: before, Limit: limit + 1}
			var next int64
			err := printList(c, cmd, asJSON, listing[*twicetype.Workflow, workflowJSON]{
				list: func(client *twice.Client, ctx context.Context) ([]*twicetype.Workflow, error) {
					list, err := client.WorkflowList(ctx, opts)
					if len(list) > limit {
						list = list[:limit]
						next = list[limit-1].ID
					}
					return list, err
				},
				toJSON: newWorkflowJSON,
				empty:  "no workflows",
				header: "ID\tNAME\tSTATE\tDONE\tDEAD\tON DEAD\tCREATED",
				row: func(tw io.Writer, w *twicetype.Workflow) {
					fmt.Fprintf(tw, "%d\t%s\t%s\t%d/%d\t%d\t%s\t%s\n", w.ID, terminalText(truncate(w.Name, 40)), workflowState(w),
						w.Completed, w.Tasks, w.Dead, terminalText(w.OnDead), formatTime(w.CreatedAt))
				},
			})
			if err == nil && next != 0 && !asJSON {
				fmt.Fprintf(c.stderr, "more may follow: add --before %d\n", next)
			}
			return err
		}),
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.StringVar(&state, "state", "", "only workflows in this state: running, completed, failed or cancelled")
	f.IntVar(&limit, "limit", 100, fmt.Sprintf("list at most this many, newest first (at most %d)", twice.JobListLimitMax))
	f.Int64Var(&before, "before", 0, "list only workflows with a smaller id (the next page)")
	return cmd
}

// workflowTaskJSON is one task as 'workflows show --json' prints it.
type workflowTaskJSON struct {
	Name     string   `json:"name"`
	Kind     string   `json:"kind"`
	Deps     []string `json:"deps"`
	State    string   `json:"state"` // waiting, cancelled, or the job's state
	Pending  int      `json:"pending"`
	JobID    int64    `json:"job_id,omitempty"`
	Attempts int      `json:"attempts,omitempty"`
	// WaitingBecause says why a task waits: for its dependencies, those
	// not completed, or as its job waits.
	WaitingBecause *twice.WaitReason `json:"waiting_because,omitempty"`
}

func (c *cli) workflowsShowCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show a workflow's tasks: dependencies, state, job",
		Args:  exactArgs(1, "ID"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			id, err := c.parseWorkflowID(args[0])
			if err != nil {
				return err
			}
			client, done, err := c.openClient(cmd)
			if err != nil {
				return err
			}
			defer done()
			info, err := client.WorkflowGet(cmd.Context(), id)
			if errors.Is(err, twicestore.ErrNotFound) {
				return usagef("workflow %d not found: list them with '%s workflows ls'", id, c.name)
			}
			if err != nil {
				return err
			}
			ordered := info.TasksInOrder()
			reasons, err := client.WorkflowWaitReasons(cmd.Context(), info)
			if err != nil {
				return err
			}
			tasks := make([]workflowTaskJSON, len(ordered))
			for i, t := range ordered {
				tj := workflowTaskJSON{Name: t.Name, Kind: t.Kind, Deps: t.Deps, State: string(t.State), Pending: t.Pending,
					WaitingBecause: reasons[t.Name]}
				if tj.Deps == nil {
					tj.Deps = []string{}
				}
				if t.Job != nil {
					tj.State, tj.JobID, tj.Attempts = string(t.Job.State), t.Job.ID, t.Job.Attempt
				}
				tasks[i] = tj
			}
			if asJSON {
				return writeJSON(c.stdout, struct {
					workflowJSON
					TaskList []workflowTaskJSON `json:"task_list"`
				}{newWorkflowJSON(info.Workflow), tasks})
			}
			w, n := info.Workflow, info.Counts()
			fmt.Fprintf(c.stdout, "workflow %d %q: %s, %d/%d tasks completed, %d dead, %d cancelled, on dead: %s\n",
				w.ID, w.Name, workflowState(w), n.Completed, w.Tasks, n.Dead, n.Cancelled, terminalText(w.OnDead))
			tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "TASK\tKIND\tSTATE\tJOB\tWAITS FOR")
			for _, t := range tasks {
				job, deps := "-", "-"
				if t.JobID != 0 {
					job = fmt.Sprint(t.JobID)
				}
				state := t.State
				if len(t.Deps) > 0 {
					deps = strings.Join(t.Deps, ",")
					if t.JobID == 0 && t.State == string(twicetype.WorkflowTaskWaiting) {
						deps += " (waiting for " + strings.Join(t.WaitingBecause.Dependencies, ",") + ")"
						state = "pending" // for its dependencies; a parked job is "waiting"
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", terminalText(t.Name), terminalText(t.Kind), state, job, terminalText(deps))
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (c *cli) workflowsCancelCommand() *cobra.Command {
	var reason, by string
	cmd := &cobra.Command{
		Use:   "cancel ID --reason WHY",
		Short: "Cancel a workflow: its waiting tasks never run, its unfinished jobs are cancelled",
		Args:  exactArgs(1, "ID"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			id, err := c.parseWorkflowID(args[0])
			if err != nil {
				return err
			}
			if strings.TrimSpace(reason) == "" {
				return usagef(`--reason is required: say why the workflow is cancelled, e.g. --reason "wrong input"`)
			}
			who, err := byFlag(cmd, by)
			if err != nil {
				return err
			}
			client, done, err := c.openClient(cmd)
			if err != nil {
				return err
			}
			defer done()
			info, err := client.WorkflowGet(cmd.Context(), id)
			if errors.Is(err, twicestore.ErrNotFound) {
				return usagef("workflow %d not found: list them with '%s workflows ls'", id, c.name)
			}
			if err != nil {
				return err
			}
			if st := info.Workflow.State; st != twicetype.WorkflowRunning {
				return fmt.Errorf("workflow %d is %s already: nothing to cancel", id, st)
			}
			res, err := client.WorkflowCancel(cmd.Context(), id, who, reason)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "cancelled workflow %d: %d waiting tasks will not run, %d jobs cancelled or asked to stop\n",
				id, res.Tasks, len(res.Jobs.IDs))
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the workflow is cancelled (required)")
	cmd.Flags().StringVar(&by, "by", "", "who cancels it (default $USER@hostname)")
	return cmd
}

func (c *cli) parseWorkflowID(s string) (int64, error) {
	var id int64
	if _, err := fmt.Sscan(s, &id); err != nil || id < 1 || fmt.Sprint(id) != s {
		return 0, usagef("%q is not a workflow id: use a positive integer (see '%s workflows ls')", s, c.name)
	}
	return id, nil
}
