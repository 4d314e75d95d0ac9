// Package cli is the twice command line: it parses the arguments of a
// twice binary and runs its commands (serve, dashboard, migrate, enqueue,
// jobs, dlq, queues, orphans, recurring, toggles, markers, bench, and in
// the stock binary demo) against a SQLite database, PostgreSQL or MySQL,
// reporting failures as one line and an exit code. The public face is
// package twicecli; the stock binary adds the demo.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/twicejobs/twice"
)

// Exit codes.
const (
	ExitOK      = 0 // the command did what it was asked
	ExitFailure = 1 // it could not: the database, a job, the runtime
	ExitUsage   = 2 // it was asked wrongly: a flag, an argument, the input
)

// DBDefault is the database --db names when neither the flag nor the
// TWICE_DB environment variable is set.
const DBDefault = "./twice.db"

// Options is what a twice binary is built with.
type Options struct {
	// Registry holds the binary's own kinds: serve works them, and every
	// command knows their args types, sensitive fields and fail-closed
	// flags without asking the catalog. Nil means none (the stock binary).
	Registry *twice.Registry
	// Config is the base of the client serve starts (queues, middleware,
	// observer...); its Registry is replaced by Registry.
	Config twice.Config
	// Demo, when set, adds 'twice demo', which runs on the demo's own
	// registry; only the stock binary sets it, to DemoCommand.
	Demo func(*cli) *cobra.Command
	// Name is the binary's name, as its usage, examples, hints and error
	// lines call it. Defaults to "twice".
	Name string
}

// Main runs the twice command line with args (without the program name),
// writing output to stdout and errors, as one line "twice: <message>", to
// stderr. It returns the exit code. ctx ends long-running commands (serve,
// dashboard, demo), which then shut down cleanly.
func Main(ctx context.Context, opts Options, args []string, stdout, stderr io.Writer) int {
	reg := opts.Registry
	if reg == nil {
		reg = twice.NewRegistry()
	}
	name := opts.Name
	if name == "" {
		name = "twice"
	}
	c := &cli{stdout: stdout, stderr: stderr, reg: reg, stock: opts.Registry == nil, cfg: opts.Config, demo: opts.Demo, name: name}
	root := c.rootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	code := ExitUsage // errors cobra raises itself (flags, arguments) are usage errors
	var f *failure
	if errors.As(err, &f) {
		code = ExitFailure
	}
	var u *usageError
	if errors.As(err, &u) {
		code = ExitUsage
	}
	// The library's errors carry their own "twice: " prefix.
	// Errors may quote stored text: printed as terminalText.
	msg := terminalText(strings.TrimPrefix(oneLine(err.Error()), "twice: "))
	if code == ExitUsage && cmd != nil {
		msg += fmt.Sprintf(" (see '%s --help')", cmd.CommandPath())
	}
	fmt.Fprintf(stderr, "%s: %s\n", name, msg)
	return code
}

// cli holds what every command shares: the output streams and the
// persistent flags.
type cli struct {
	stdout, stderr io.Writer
	db             string
	logLevel       string
	// reg is the binary's registry, never nil; stock reports that the
	// binary was built without one.
	reg   *twice.Registry
	stock bool
	cfg   twice.Config
	demo  func(*cli) *cobra.Command
	// name is the binary's name (Options.Name), for usage and hints.
	name string
}

func (c *cli) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   c.name,
		Short: "Operate twice, the background-job system where every handler runs at least twice",
		Long: `twice runs background jobs that converge when delivered twice.

The database is a SQLite file, a postgres:// URL or a
mysql://user:pass@host:3306/db?parseTime=true URL (MySQL 8.0+, MariaDB
10.6+; mariadb:// too): --db, else $TWICE_DB, else ` + DBDefault + `.

This command line knows the kinds of the binary it is built into (a team
builds its own with twicecli.Main(registry)) and, for any other kind, the
catalog every worker publishes to the database: their fail-closed flags,
args fields and sensitive fields.`,
		SilenceErrors:     true,
		SilenceUsage:      true,
		PersistentPreRunE: checkText,
		Args:              unknownSubcommand,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("missing command: one of %s", strings.Join(subcommandNames(cmd), ", "))
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	db := DBDefault
	if env := os.Getenv("TWICE_DB"); env != "" {
		db = env
	}
	root.PersistentFlags().StringVar(&c.db, "db", db, "SQLite database file, or a postgres:// or mysql:// URL (env TWICE_DB)")
	root.PersistentFlags().StringVar(&c.logLevel, "log-level", "", "log level: debug, info, warn or error (default info for serve, dashboard and demo, warn for demo --once, error elsewhere; info logs every action with who and why)")
	if c.demo != nil {
		root.AddCommand(c.demo(c))
	}
	root.AddCommand(
		c.serveCommand(),
		c.dashboardCommand(),
		c.migrateCommand(),
		c.enqueueCommand(),
		c.jobsCommand(),
		c.dlqCommand(),
		c.queuesCommand(),
		c.limitsCommand(),
		c.kindsCommand(),
		c.workflowsCommand(),
		c.batchesCommand(),
		c.orphansCommand(),
		c.recurringCommand(),
		c.togglesCommand(),
		c.markersCommand(),
		c.benchCommand(),
	)
	if c.name != "twice" {
		renameExamples(root, c.name)
	}
	return root
}

// renameExamples rewrites the examples of cmd and its subcommands, written
// for a binary called twice, for one called name.
func renameExamples(cmd *cobra.Command, name string) {
	cmd.Example = strings.ReplaceAll(cmd.Example, " twice ", " "+name+" ")
	for _, sub := range cmd.Commands() {
		renameExamples(sub, name)
	}
}

// checkText refuses, before any command runs, a flag value or argument
// that is not UTF-8 text or holds a NUL byte: no kind, queue, key or path
// has one, and a database given one answers with a raw error (PostgreSQL
// refuses both) rather than "no such kind". It checks every flag, set or
// defaulted from the environment.
func checkText(cmd *cobra.Command, args []string) error {
	var bad error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if bad == nil {
			if err := textError(f.Value.String()); err != nil {
				bad = usagef("--%s %q: %v", f.Name, f.Value.String(), err)
			}
		}
	})
	if bad != nil {
		return bad
	}
	for i, a := range args {
		if err := textError(a); err != nil {
			return usagef("argument %d %q: %v", i+1, a, err)
		}
	}
	return nil
}

// textError says what is wrong with s as text, or nil.
func textError(s string) error {
	switch {
	case !utf8.ValidString(s):
		return errors.New("not UTF-8 text: retype it, or fix the terminal's encoding")
	case strings.ContainsRune(s, 0):
		return errors.New("contains a NUL byte: remove it")
	}
	return nil
}

// group makes cmd a command that only holds subcommands: run bare or with
// an unknown subcommand, it is a usage error rather than help and success.
func group(cmd *cobra.Command) *cobra.Command {
	cmd.Args = unknownSubcommand
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return usagef("missing subcommand: one of %s", strings.Join(subcommandNames(cmd), ", "))
	}
	return cmd
}

func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf(": did you mean %q?", s[0])
	}
	return usagef("%s", msg)
}

func subcommandNames(cmd *cobra.Command) []string {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	return names
}

// run adapts a command's function: an error it returns is a runtime
// failure (exit 1) unless it is a usage error, or an error of the admin
// API or enqueue that the input caused (but for a job id that names no
// job, which is the database's state).
func run(fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := fn(cmd, args)
		var u *usageError
		switch {
		case err == nil || errors.As(err, &u):
			return err
		case errors.Is(err, twice.ErrInvalidInput): // the usage class: ErrInvalidArgs, ErrUnknownKind and the rest
			return &usageError{err: err}
		}
		return &failure{err: err}
	}
}

// exactArgs is cobra.ExactArgs with a message naming the arguments.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s takes %d arguments (%s), got %d", cmd.CommandPath(), n, names, len(args))
		}
		return nil
	}
}

// usageError is bad input: exit code 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// failure is an error a command returned: exit code 1.
type failure struct{ err error }

func (e *failure) Error() string { return e.err.Error() }
func (e *failure) Unwrap() error { return e.err }

// oneLine folds a multi-line error (errors.Join, cobra's hints) into one.
func oneLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	out := lines[:0]
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "; ")
}

// logger returns the logger serve and demo write to stderr, at the level
// of --log-level, or fallback when the flag was not given.
func (c *cli) logger(cmd *cobra.Command, fallback slog.Level) (*slog.Logger, error) {
	level := fallback
	if cmd.Flags().Changed("log-level") {
		if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
			return nil, usagef("--log-level %q: use debug, info, warn or error", c.logLevel)
		}
	}
	return slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: level})), nil
}
