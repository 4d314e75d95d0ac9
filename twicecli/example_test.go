package twicecli_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicecli"
)

// ChargeInvoice is a kind of the team's own.
type ChargeInvoice struct {
	InvoiceID int64 `json:"invoice_id"`
}

// Kind implements twice.Args.
func (ChargeInvoice) Kind() string { return "invoice.charge.v1" }

// A team's CLI knows its kinds: here toggles ls shows the fail-closed
// invoice kind off by default. A real main is twicecli.Main(reg); Run is
// the same command line with its streams and exit code in hand.
func ExampleNew() {
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[ChargeInvoice](func(context.Context, *twice.Job[ChargeInvoice]) error {
		return nil
	}), &twice.KindOpts{FailClosed: true})
	cli := twicecli.New(reg, nil)

	dir, _ := os.MkdirTemp("", "twicecli-example-")
	defer func() { _ = os.RemoveAll(dir) }()
	db := filepath.Join(dir, "twice.db")
	ctx := context.Background()
	cli.Run(ctx, []string{"migrate", "--db", db}, io.Discard, os.Stderr)
	code := cli.Run(ctx, []string{"toggles", "ls", "--db", db}, os.Stdout, os.Stderr)
	fmt.Println("exit", code)
	code = cli.Run(ctx, []string{"enqueue", "invoice.charge.v1", `{"invoice_id": "7"}`, "--db", db}, os.Stdout, os.Stdout)
	fmt.Println("exit", code)
	// Output:
	// KIND               STATE  DECIDED BY  FAIL-CLOSED  STORE  FILE  SET BY  AT  EXPIRES  REASON
	// invoice.charge.v1  off    default     yes          -      -     -       -   -        -
	// (no --file given: the workers' kill switch file, if any, is not included)
	// exit 0
	// twice: args for kind "invoice.charge.v1" do not match twicecli_test.ChargeInvoice: json: cannot unmarshal string into Go struct field ChargeInvoice.invoice_id of type int64 (see 'twice enqueue --help')
	// exit 2
}
