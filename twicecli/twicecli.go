// Package twicecli is the twice command line built around your own job
// kinds. A team's operator binary is three lines:
//
//	func main() {
//		reg := twice.NewRegistry()
//		twice.MustRegister(reg, sendInvoice, &twice.KindOpts{FailClosed: true})
//		twicecli.Main(reg)
//	}
//
// It has every command of the stock twice binary: 'serve' works the
// registry's kinds (with the handlers registered in it), and 'enqueue',
// 'jobs', 'toggles' and the dashboard know their args types, sensitive
// fields and fail-closed flags. Kinds it does not register are described
// by the catalog every worker publishes to the store.
//
// The stock twice binary is this package with no registry (its 'serve'
// refuses to start: it has no kinds to work) plus 'twice demo'.
package twicecli

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/cli"
)

// Exit codes of Run and Main.
const (
	ExitOK      = cli.ExitOK      // the command did what it was asked
	ExitFailure = cli.ExitFailure // it could not: the database, a job, the state of a job
	ExitUsage   = cli.ExitUsage   // it was asked wrongly: a flag, an argument, the input
)

// Options configures a CLI beyond its registry. The zero value is the
// default.
type Options struct {
	// Config is the base of the client 'serve' starts: queues, middleware,
	// observer, logger and the rest. Its Registry is replaced by the CLI's.
	// Defaults to the zero Config.
	Config twice.Config
}

// CLI is the twice command line of one binary.
type CLI struct {
	opts cli.Options
}

// New returns the command line built with reg, the binary's own kinds
// (nil for none), and opts (nil for the defaults).
func New(reg *twice.Registry, opts *Options) *CLI {
	o := cli.Options{Registry: reg}
	if opts != nil {
		o.Config = opts.Config
	}
	return &CLI{opts: o}
}

// Main runs the command line with reg as New(reg, nil).Main does.
func Main(reg *twice.Registry) { New(reg, nil).Main() }

// Main runs the command named by os.Args, reading TWICE_DB and the
// dashboard's credentials from the environment, until it is done or, for
// serve and dashboard, until SIGINT or SIGTERM; then it exits the process
// with the command's exit code.
func (c *CLI) Main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := c.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Run runs the command named by args (without the program name), writing
// its output to stdout and a failure, as one line "twice: <message>", to
// stderr, and returns the exit code: ExitOK, ExitFailure or ExitUsage. ctx
// ends long-running commands (serve, dashboard), which then shut down
// cleanly.
func (c *CLI) Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cli.Main(ctx, c.opts, args, stdout, stderr)
}
