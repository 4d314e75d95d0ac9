package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/twicejobs/twice"
)

// listing is what an 'ls' command prints: the rows the admin API lists,
// as JSON (each row through toJSON) or as a table under header, one line
// per row, or the empty line when there is none.
type listing[T, J any] struct {
	list   func(client *twice.Client, ctx context.Context) ([]T, error) // a method expression fits
	toJSON func(T) J
	empty  string
	header string
	row    func(w io.Writer, t T)
}

// printList opens the client, lists and prints l: the one shape of every
// 'ls' command, so they open, close and print alike.
func printList[T, J any](c *cli, cmd *cobra.Command, asJSON bool, l listing[T, J]) error {
	client, done, err := c.openClient(cmd)
	if err != nil {
		return err
	}
	defer done()
	rows, err := l.list(client, cmd.Context())
	if err != nil {
		return err
	}
	if asJSON {
		out := make([]J, len(rows))
		for i, r := range rows {
			out[i] = l.toJSON(r)
		}
		return writeJSON(c.stdout, out)
	}
	if len(rows) == 0 {
		fmt.Fprintln(c.stdout, l.empty)
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, l.header)
	for _, r := range rows {
		l.row(tw, r)
	}
	return tw.Flush()
}
