package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

func (c *cli) batchesCommand() *cobra.Command {
	cmd := group(&cobra.Command{
		Use:   "batches",
		Short: "Batches of jobs and their callbacks: list them, show one's counters",
	})
	cmd.AddCommand(c.batchesListCommand(), c.batchesShowCommand())
	return cmd
}

// batchJSON is one batch as --json prints it.
type batchJSON struct {
	ID            int64      `json:"id"`
	State         string     `json:"state"`
	OnSuccess     bool       `json:"on_success"`
	Open          bool       `json:"open"`
	Total         int        `json:"total"`
	Pending       int        `json:"pending"`
	Completed     int        `json:"completed"`
	Dead          int        `json:"dead"`
	Cancelled     int        `json:"cancelled"`
	CallbackKind  string     `json:"callback_kind"`
	CallbackJobID int64      `json:"callback_job_id,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	FinishedAt    *time.Time `json:"finished_at,omitempty"`
}

func newBatchJSON(b *twicetype.Batch) batchJSON {
	out := batchJSON{ID: b.ID, State: batchState(b), OnSuccess: b.OnSuccess, Open: b.Open, Total: b.Total, Pending: b.Pending,
		Completed: b.Completed, Dead: b.Dead, Cancelled: b.Cancelled, CallbackKind: b.CallbackKind,
		CallbackJobID: b.CallbackJobID, CreatedAt: b.CreatedAt}
	if !b.FinishedAt.IsZero() {
		out.FinishedAt = &b.FinishedAt
	}
	return out
}

// batchState says where a batch is: open (taking jobs), running (sealed,
// jobs pending), completed, or failed (finished with a dead or cancelled
// job).
func batchState(b *twicetype.Batch) string {
	switch {
	case b.Open:
		return "open"
	case b.FinishedAt.IsZero():
		return "running"
	case b.Failed():
		return "failed"
	}
	return "completed"
}

// batchCallback says what became of a batch's callback.
func batchCallback(b *twicetype.Batch) string {
	switch {
	case b.CallbackJobID != 0:
		return fmt.Sprintf("%s (job %d)", b.CallbackKind, b.CallbackJobID)
	case !b.FinishedAt.IsZero() && b.OnSuccess:
		return b.CallbackKind + " (not enqueued: a job failed)"
	}
	return b.CallbackKind + " (when the batch finishes)"
}

func (c *cli) batchesListCommand() *cobra.Command {
	var (
		asJSON, unfinished bool
		limit              int
		before             int64
	)
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List batches, newest first: state, jobs pending, completed, dead and cancelled, callback",
		Example: `  twice batches ls --unfinished
  twice batches ls --limit 20 --before 120`,
		Args: unknownSubcommand,
		RunE: run(func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > twice.JobListLimitMax {
				return usagef("--limit %d: use a number from 1 to %d", limit, twice.JobListLimitMax)
			}
			if before < 0 {
				return usagef("--before %d: use a batch id", before)
			}
			// One more than the limit tells whether an older page follows.
			opts := &twice.BatchListOpts{Unfinished: unfinished, Before: before, Limit: limit + 1}
			var next int64
			err := printList(c, cmd, asJSON, listing[*twicetype.Batch, batchJSON]{
				list: func(client *twice.Client, ctx context.Context) ([]*twicetype.Batch, error) {
					list, err := client.BatchList(ctx, opts)
					if len(list) > limit {
						list = list[:limit]
						next = list[limit-1].ID
					}
					return list, err
				},
				toJSON: newBatchJSON,
				empty:  "no batches",
				header: "ID\tSTATE\tPENDING\tCOMPLETED\tDEAD\tCANCELLED\tCALLBACK\tCREATED",
				row: func(tw io.Writer, b *twicetype.Batch) {
					fmt.Fprintf(tw, "%d\t%s\t%d/%d\t%d\t%d\t%d\t%s\t%s\n", b.ID, batchState(b), b.Pending, b.Total,
						b.Completed, b.Dead, b.Cancelled, terminalText(batchCallback(b)), formatTime(b.CreatedAt))
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
	f.BoolVar(&unfinished, "unfinished", false, "only batches whose jobs have not all finished")
	f.IntVar(&limit, "limit", 100, fmt.Sprintf("list at most this many, newest first (at most %d)", twice.JobListLimitMax))
	f.Int64Var(&before, "before", 0, "list only batches with a smaller id (the next page)")
	return cmd
}

func (c *cli) batchesShowCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show a batch's counters and its callback",
		Args:  exactArgs(1, "ID"),
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
			b, err := client.BatchGet(cmd.Context(), id)
			if errors.Is(err, twicestore.ErrNotFound) {
				return usagef("batch %d not found: list them with '%s batches ls'", id, c.name)
			}
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(c.stdout, newBatchJSON(b))
			}
			fmt.Fprintf(c.stdout, "batch %d: %s, %d of %d jobs pending, %d completed, %d dead, %d cancelled\n",
				b.ID, batchState(b), b.Pending, b.Total, b.Completed, b.Dead, b.Cancelled)
			fmt.Fprintf(c.stdout, "callback: %s\n", terminalText(batchCallback(b)))
			if b.OnSuccess {
				fmt.Fprintln(c.stdout, "the callback runs only if no job of the batch fails (OnSuccess)")
			}
			fmt.Fprintf(c.stdout, "created %s", formatTime(b.CreatedAt))
			if !b.FinishedAt.IsZero() {
				fmt.Fprintf(c.stdout, ", finished %s", formatTime(b.FinishedAt))
			}
			fmt.Fprintln(c.stdout)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
