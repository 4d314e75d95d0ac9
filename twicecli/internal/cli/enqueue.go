package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice"
)

func (c *cli) enqueueCommand() *cobra.Command {
	var (
		opts        twice.EnqueueOpts
		maxAttempts int
		runAt       string
		force       bool
	)
	cmd := &cobra.Command{
		Use:   "enqueue KIND JSON",
		Short: "Enqueue one job from JSON args, checked against the kind's fields",
		Long: `Enqueue one job of KIND with JSON args and print its id.

KIND must be registered in this binary (the args are then checked against
its Go type) or in the catalog the workers publish (the args are checked
against the fields the catalog lists: no unknown field, each of its JSON
type). Either way the payload policy applies: at most 2 KiB, nothing named
like a secret or personal data. A kind in no catalog is refused with the
closest known kind, so a typo never queues a job nobody runs; --force
enqueues it anyway (its keys still get the name rule), for a kind whose
workers have never run.

--queue must be a queue a catalogued kind goes to or a live worker
serves, else the job would wait forever; --force enqueues it anyway.`,
		Example: `  twice enqueue email.partner-verification.v1 '{"user_id": 42}'
  twice enqueue balance.credit.v1 '{"credit_id": 7, "user_id": 42, "amount_cents": 500}' --unique-key credit-7
  twice enqueue report.build.v1 '{"report_id": 9}' --run-at 2026-12-01T06:00:00Z`,
		Args: exactArgs(2, "KIND and JSON"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			kind, raw := args[0], []byte(args[1])
			if opts.Delay < 0 {
				return usagef("--delay %s is negative", opts.Delay)
			}
			if maxAttempts < 0 {
				return usagef("--max-attempts %d: use a positive number (0 for the default)", maxAttempts)
			}
			opts.MaxAttempts = maxAttempts
			if runAt != "" {
				if cmd.Flags().Changed("delay") {
					return usagef("--run-at and --delay exclude each other: give one")
				}
				t, err := parseTime("--run-at", runAt)
				if err != nil {
					return err
				}
				opts.RunAt = t
			}
			if err := checkArgsShape(kind, raw); err != nil {
				return err
			}
			if _, registered := c.reg.SensitiveFields(kind); registered {
				// The Go type decides, before the database is opened.
				if err := c.reg.ValidateArgs(kind, raw); err != nil {
					return &usageError{err: err}
				}
			}
			client, done, err := c.openClient(cmd)
			if err != nil {
				return err
			}
			defer done()
			if err := c.checkEnqueue(cmd, client, kind, raw, &opts, force); err != nil {
				return err
			}
			res, err := client.EnqueueJSON(cmd.Context(), kind, raw, &opts)
			if err != nil {
				return err
			}
			if res.Duplicate {
				fmt.Fprintf(c.stdout, "duplicate of job %d: an unfinished %s job has unique key %q; nothing enqueued\n",
					res.Job.ID, kind, opts.UniqueKey)
				return nil
			}
			fmt.Fprintf(c.stdout, "enqueued job %d (%s, queue %s, run at %s)\n",
				res.Job.ID, kind, res.Job.Queue, formatTime(res.Job.RunAt))
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&opts.Queue, "queue", "", "queue (default: the kind's, else \"default\")")
	f.IntVar(&opts.Priority, "priority", 0, "priority within the queue, lower first")
	f.DurationVar(&opts.Delay, "delay", 0, "run no earlier than this long from now, e.g. 30s")
	f.StringVar(&runAt, "run-at", "", "run no earlier than this time (RFC 3339, e.g. 2026-12-01T06:00:00Z)")
	f.IntVar(&maxAttempts, "max-attempts", 0, "attempts before the job is dead-lettered (default: the kind's, else 20)")
	f.StringVar(&opts.UniqueKey, "unique-key", "", "enqueue nothing while an unfinished job of the kind has this key")
	f.BoolVar(&force, "force", false, "enqueue a kind in no catalog, or to a queue no catalogued kind goes to and no live worker serves")
	return cmd
}

// checkEnqueue refuses, as usage errors, a kind or queue known nowhere
// (unless force) and args that do not fit the kind's catalogued fields.
func (c *cli) checkEnqueue(cmd *cobra.Command, client *twice.Client, kind string, raw []byte, opts *twice.EnqueueOpts, force bool) error {
	book, err := c.loadKindBook(cmd.Context(), client, false)
	if err != nil {
		return err
	}
	e, catalogued := book.lookup(kind)
	switch {
	case catalogued && !e.Registered:
		// Only the catalog knows the kind: its fields and their JSON types,
		// and the queue and attempts its workers registered it with, which
		// come before the client's defaults as a registration's would.
		if err := twice.CheckArgsJSON(kind, raw, e.Args, 0); err != nil {
			return &usageError{err: err}
		}
		if opts.Queue == "" {
			opts.Queue = e.Queue
		}
		if opts.MaxAttempts == 0 {
			opts.MaxAttempts = e.MaxAttempts
		}
	case !catalogued && !force:
		return usagef("%s: kind %q is in no catalog and not registered in this binary%s (--force enqueues it anyway, for a kind whose workers have never run)",
			twice.ErrUnknownKind, kind, book.suggest(kind))
	case !catalogued:
		// Forced: the shape is unknown, so the keys get the name rule.
		if err := twice.CheckArgsJSON(kind, raw, nil, 0); err != nil {
			return &usageError{err: err}
		}
		opts.AllowUnknownKind = true
	}
	if opts.Queue == "" || force {
		return nil
	}
	known := book.queues()
	for _, q := range c.cfg.Queues {
		known = append(known, q.Name)
	}
	queues, err := client.QueueList(cmd.Context())
	if err != nil {
		return err
	}
	for _, q := range queues {
		if len(q.Nodes) > 0 {
			known = append(known, q.Name)
		}
	}
	if !slices.Contains(known, opts.Queue) {
		slices.Sort(known)
		return usagef("queue %q: no catalogued kind goes to it and no live worker serves it, so the job would wait forever%s (--force enqueues it anyway)",
			opts.Queue, didYouMean(opts.Queue, slices.Compact(known)))
	}
	return nil
}

// checkArgsShape rejects, before the database is opened, a malformed kind
// and args that are not one JSON object within the size limit.
func checkArgsShape(kind string, raw []byte) error {
	if err := twice.ValidateKind(kind); err != nil {
		return &usageError{err: err}
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return usagef("args are not valid JSON (%v): pass an object like '{\"user_id\": 42}'", err)
	}
	if _, ok := v.(map[string]any); !ok {
		return usagef("args are a JSON %s, not an object: pass one like '{\"user_id\": 42}'", jsonType(v))
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err == nil && compact.Len() > twice.MaxArgsBytesDefault {
		return usagef("args are %d bytes, over the %d-byte limit: pass IDs, not data", compact.Len(), twice.MaxArgsBytesDefault)
	}
	return nil
}

// parseTime reads a time flag: RFC 3339, or a local date and time.
func parseTime(flag, s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02 15:04"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, usagef("%s %q: give a time like 2026-12-01T06:00:00Z (RFC 3339)", flag, s)
}

func jsonType(v any) string {
	switch v.(type) {
	case []any:
		return "array"
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "boolean"
	}
	return "null"
}

// formatTime shows a time in the local zone to the second, or "-".
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}
