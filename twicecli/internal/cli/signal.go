package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice"
)

// signalJSON is what `jobs signal --json` prints.
type signalJSON struct {
	JobID     int64           `json:"job_id"`
	Name      string          `json:"name"`
	Woke      bool            `json:"woke"`
	Duplicate bool            `json:"duplicate"`
	Existing  *signalSentJSON `json:"existing,omitempty"`
}

// signalSentJSON is a wait's earlier resolution.
type signalSentJSON struct {
	Payload  json.RawMessage `json:"payload,omitempty"`
	TimedOut bool            `json:"timed_out"`
	At       time.Time       `json:"at"`
	Sender   string          `json:"sender,omitempty"`
}

func (c *cli) jobsSignalCommand() *cobra.Command {
	var by, payload string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "signal ID NAME",
		Short: "Send the signal NAME to job ID: wake it if it waits for NAME, or keep it for when it does",
		Long: `Send the signal NAME, with the JSON --payload, to job ID. A job waiting
for NAME (twice.AwaitSignal) becomes available and its handler runs again
with the payload; a job that has not reached that wait yet finds the
signal when it does. Each wait takes one signal: sending it again changes
nothing and says what the first one was. A finished job takes none.`,
		Example: `  twice jobs signal 42 approve --payload '{"approved": true, "note": "checked the invoice"}'
  twice jobs signal 42 shipped`,
		Args: exactArgs(2, "ID NAME"),
		RunE: run(func(cmd *cobra.Command, args []string) error {
			id, err := parseID(args[0])
			if err != nil {
				return err
			}
			by, err := byFlag(cmd, by)
			if err != nil {
				return err
			}
			raw := json.RawMessage("null")
			if payload != "" {
				if !json.Valid([]byte(payload)) {
					return usagef("--payload is not JSON: pass one JSON value, such as '{\"approved\": true}'")
				}
				raw = json.RawMessage(payload)
			}
			client, done, err := c.openClient(cmd)
			if err != nil {
				return err
			}
			defer done()
			res, err := client.Signal(cmd.Context(), &twice.SignalParams{JobID: id, Name: args[1], Payload: raw, By: by})
			if err != nil {
				return err
			}
			if asJSON {
				out := signalJSON{JobID: id, Name: args[1], Woke: res.Woke, Duplicate: res.Duplicate}
				if e := res.Existing; e != nil {
					out.Existing = &signalSentJSON{Payload: e.Payload, TimedOut: e.TimedOut, At: e.At, Sender: e.Sender}
				}
				return writeJSON(c.stdout, out)
			}
			name := terminalText(args[1])
			switch e := res.Existing; {
			case e != nil && e.TimedOut:
				fmt.Fprintf(c.stdout, "job %d: the wait %s timed out at %s, before this signal: nothing changed\n", id, name, e.At.Format(time.RFC3339))
			case e != nil:
				fmt.Fprintf(c.stdout, "job %d already has signal %s (sent at %s by %s): nothing changed\n", id, name,
					e.At.Format(time.RFC3339), terminalText(e.Sender))
			case res.Woke:
				fmt.Fprintf(c.stdout, "job %d: signal %s delivered; the job was waiting for it and runs again now\n", id, name)
			default:
				fmt.Fprintf(c.stdout, "job %d: signal %s stored; the job is not waiting for it yet and will find it when it does\n", id, name)
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&payload, "payload", "", "the signal's payload, one JSON value (default null)")
	cmd.Flags().StringVar(&by, "by", "", "who sends it, for the record (default: user@host)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// waitTokenKey is the key that checks wait tokens: the binary's
// Config.WaitTokenKey, else $TWICE_WAIT_TOKEN_KEY (the same secret the
// workers sign with).
func (c *cli) waitTokenKey() []byte {
	if len(c.cfg.WaitTokenKey) > 0 {
		return c.cfg.WaitTokenKey
	}
	if k := os.Getenv("TWICE_WAIT_TOKEN_KEY"); k != "" {
		return []byte(k)
	}
	return nil
}
