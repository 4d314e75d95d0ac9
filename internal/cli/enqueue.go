package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice"
)

func (c *cli) enqueueCommand() *cobra.Command {
	var (
		opts        twice.EnqueueOpts
		maxAttempts int
	)
	cmd := &cobra.Command{
		Use:   "enqueue KIND JSON",
		Short: "Enqueue one job from JSON args",
		Long: `Enqueue one job of KIND with JSON args and print its id.

KIND must be a kind this binary registers (its args are then checked
against the Go type: no unknown fields, right types) or one a live worker
handles. Anything else is refused, so a typo never queues a job nobody runs.`,
		Example: `  twice enqueue email.partner-verification.v1 '{"user_id": 42}'
  twice enqueue balance.credit.v1 '{"credit_id": 7, "user_id": 42, "amount_cents": 500}' --unique-key credit-7`,
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
			reg := c.reg
			if err := checkEnqueueInput(reg, kind, raw); err != nil {
				return err
			}
			store, err := c.openStore(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer store.Close()
			client, err := twice.NewClient(store, twice.Config{Registry: reg})
			if err != nil {
				return err
			}
			res, err := client.EnqueueJSON(cmd.Context(), kind, raw, &opts)
			if errors.Is(err, twice.ErrUnknownKind) || errors.Is(err, twice.ErrInvalidArgs) {
				return &usageError{err: err}
			}
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
	f.IntVar(&maxAttempts, "max-attempts", 0, "attempts before the job is dead-lettered (default: the kind's, else 20)")
	f.StringVar(&opts.UniqueKey, "unique-key", "", "enqueue nothing while an unfinished job of the kind has this key")
	return cmd
}

// checkEnqueueInput rejects, as usage errors, input the runtime would
// refuse: a malformed kind, args that are not a JSON object, args that do
// not fit the type the kind has in reg, args over the size limit.
func checkEnqueueInput(reg *twice.Registry, kind string, raw []byte) error {
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
	for _, k := range reg.Kinds() {
		if k == kind {
			if err := reg.ValidateArgs(kind, raw); err != nil {
				return &usageError{err: err}
			}
		}
	}
	return nil
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
