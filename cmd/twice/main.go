// Command twice is the stock twice binary: package twicecli with no job
// kinds of its own, plus 'twice demo'. It inspects and repairs any twice
// database (the catalog the workers publish describes their kinds), serves
// the dashboard and runs the demo; to work your own kinds, build your own
// binary with twicecli.Main(registry).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/twicejobs/twice/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, cli.Options{Demo: true}, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
