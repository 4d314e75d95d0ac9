package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice"
)

// schemaReadTimeout bounds how long 'kinds check --against' waits for the
// other binary to print its schema: it reads no database, so a binary
// that takes longer is not a twice worker answering.
const schemaReadTimeout = 30 * time.Second

// kindsSchemaCommand is 'kinds schema': this binary's kinds and their
// args as JSON, read by another build's 'kinds check --against'.
func (c *cli) kindsSchemaCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the args of this binary's kinds as JSON, for another build's 'kinds check --against' (no database)",
		Long: "Print, as JSON, every kind this binary registers and its args' fields (JSON name and type,\n" +
			"sensitive or not). It opens no database. 'NEW kinds check --against OLD' runs it on OLD.",
		Args: cobra.NoArgs,
		RunE: run(func(*cobra.Command, []string) error {
			return writeJSON(c.stdout, c.reg.ArgsSchema())
		}),
	}
}

// readArgsSchema runs 'BINARY kinds schema' and reads its output: the
// args of the build deployed now. A path that does not run, or prints
// something other than an args schema, is bad input.
func readArgsSchema(ctx context.Context, binary string) (*twice.ArgsSchema, error) {
	ctx, cancel := context.WithTimeout(ctx, schemaReadTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, binary, "kinds", "schema")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var detail string
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			detail = ": " + truncate(terminalText(msg), 200)
		}
		if errors.Is(err, exec.ErrNotFound) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			detail = ""
		}
		return nil, usagef("--against %s: running '%s kinds schema' failed (%v%s): give the path of a twice worker binary (built with twicecli.Main), or catalog",
			binary, binary, err, detail)
	}
	var schema twice.ArgsSchema
	dec := json.NewDecoder(&stdout)
	if err := dec.Decode(&schema); err != nil {
		return nil, usagef("--against %s: '%s kinds schema' printed no args schema (%v): give the path of a twice worker binary (built with twicecli.Main), or catalog", binary, binary, err)
	}
	schema.Binary = binary
	if err := schema.Validate(); err != nil {
		return nil, usagef("--against %s: %v", binary, err)
	}
	if len(schema.Kinds) == 0 {
		return nil, usagef("--against %s: it registers no kinds, so it is not a worker binary: give the path of the worker build deployed now, or catalog", binary)
	}
	return &schema, nil
}
