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
// A binary that needs more than its kinds — the queues and concurrency its
// 'serve' works, middleware, an observer, a logger — passes them as the
// base Config of New:
//
//	func main() {
//		twicecli.New(app.Registry(), &twicecli.Options{Config: twice.Config{
//			Queues: []twice.QueueConfig{{Name: "default", Concurrency: 10}, {Name: "email", Concurrency: 5}},
//		}}).Main()
//	}
//
// The binary calls itself by its own name (the base of os.Args[0], or
// Options.Name) in its usage, examples, hints and error lines.
//
// The stock twice binary is this package with no registry (its 'serve'
// refuses to start: it has no kinds to work) plus 'twice demo'.
package twicecli

import (
	"context"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicecli/internal/cli"
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
	// Config is the base of the client 'serve' starts: queues and their
	// concurrency, middleware, observer, logger and the rest, as
	// twice.NewClient takes them. Its Registry is replaced by the CLI's.
	// Defaults to the zero Config (the default queue, at the default
	// concurrency).
	Config twice.Config
	// Name is what the command line calls itself in its usage, examples,
	// hints and error lines. Defaults to the base name of os.Args[0] in
	// Main, and to "twice" in Run.
	Name string
}

// CLI is the twice command line of one binary.
type CLI struct {
	opts cli.Options
}

// New returns the command line built with reg, the binary's own kinds
// (nil for none), and opts (nil for the defaults): opts.Config is the
// base of the client its 'serve' starts.
func New(reg *twice.Registry, opts *Options) *CLI {
	o := cli.Options{Registry: reg}
	if opts != nil {
		o.Config, o.Name = opts.Config, opts.Name
	}
	return &CLI{opts: o}
}

// Stock returns the stock twice binary's command line: no kinds of its
// own (its 'serve' refuses to start: it has none to work), every other
// command for any twice database (the catalog the workers publish
// describes their kinds), and 'twice demo'. cmd/twice is Stock().Main();
// only a binary that calls Stock links the demo.
func Stock() *CLI {
	return &CLI{opts: cli.Options{Demo: cli.DemoCommand}}
}

// Main runs the command line with reg as New(reg, nil).Main does.
func Main(reg *twice.Registry) { New(reg, nil).Main() }

// Main runs the command named by os.Args, reading TWICE_DB and the
// dashboard's credentials from the environment, until it is done or, for
// serve and dashboard, until SIGINT or SIGTERM; then it exits the process
// with the command's exit code.
func (c *CLI) Main() {
	if c.opts.Name == "" {
		c.opts.Name = binaryName(os.Args[0])
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := c.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// binaryName is the name a binary started as arg0 calls itself: its base
// name, without a Windows ".exe"; "twice" when arg0 says nothing.
func binaryName(arg0 string) string {
	name := strings.TrimSuffix(filepath.Base(arg0), ".exe")
	if name == "" || name == "." || name == string(filepath.Separator) {
		return "twice"
	}
	return name
}

// Run runs the command named by args (without the program name), writing
// its output to stdout and a failure, as one line "NAME: <message>" (NAME
// is Options.Name, "twice" by default), to stderr, and returns the exit code: ExitOK, ExitFailure or ExitUsage. ctx
// ends long-running commands (serve, dashboard), which then shut down
// cleanly.
func (c *CLI) Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cli.Main(ctx, c.opts, args, stdout, stderr)
}
