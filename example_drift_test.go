package twice_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicesqlite"
)

// InvoiceSend is invoice.send.v1 as the running deploy has it.
type InvoiceSend struct {
	InvoiceID int64  `json:"invoice_id"`
	Currency  string `json:"currency"`
}

func (InvoiceSend) Kind() string { return "invoice.send.v1" }

// InvoiceSendNext is the next deploy's invoice.send.v1: currency renamed
// to currency_code, which the jobs already waiting do not have.
type InvoiceSendNext struct {
	InvoiceID    int64  `json:"invoice_id"`
	CurrencyCode string `json:"currency_code"`
}

func (InvoiceSendNext) Kind() string { return "invoice.send.v1" }

// Check a deploy's args against the jobs that wait before starting it: a
// renamed field is incompatible, and Start would refuse with the same
// error (ErrArgsIncompatible) naming the field, the jobs and the next
// version.
func ExampleClient_CheckArgs() {
	dir, _ := os.MkdirTemp("", "twice-drift-example")
	defer func() { _ = os.RemoveAll(dir) }()
	ctx := context.Background()
	store, err := twicesqlite.Open(ctx, filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	defer func() { _ = store.Close() }()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	// The running deploy has two invoices waiting.
	current := twice.NewRegistry()
	twice.MustRegister(current, twice.HandlerFunc[InvoiceSend](func(context.Context, *twice.Job[InvoiceSend]) error { return nil }), nil)
	producer, _ := twice.NewClient(store, twice.Config{Registry: current, Logger: quiet})
	for id := range int64(2) {
		_, _ = producer.Enqueue(ctx, InvoiceSend{InvoiceID: id, Currency: "EUR"}, &twice.EnqueueOpts{Delay: time.Hour})
	}

	// The next deploy renamed a field.
	next := twice.NewRegistry()
	twice.MustRegister(next, twice.HandlerFunc[InvoiceSendNext](func(context.Context, *twice.Job[InvoiceSendNext]) error { return nil }), nil)
	client, _ := twice.NewClient(store, twice.Config{Registry: next, Logger: quiet})
	rep, err := client.CheckArgs(ctx)
	if err != nil {
		panic(err) // the store could not be read
	}
	for _, k := range rep.Kinds {
		fmt.Printf("%s: %s, %d jobs read\n", k.Kind, k.Verdict, k.JobsScanned)
		for _, ch := range k.Changes {
			fmt.Printf("  %s %s: %d jobs, compatible %t\n", ch.Field, ch.Change, ch.Jobs, ch.Compatible)
		}
	}
	fmt.Println(errors.Is(rep.Err(), twice.ErrArgsIncompatible))
	// Output:
	// invoice.send.v1: incompatible, 2 jobs read
	//   currency removed: 2 jobs, compatible false
	//   currency_code added: 0 jobs, compatible true
	// true
}

// Check a new build's args against the build deployed now, with no
// database, as a CI pipeline does with 'NEW kinds check --against OLD':
// the deployed build's schema (what 'kinds schema' prints) still has
// currency, which the new build renamed.
func ExampleRegistry_CheckArgsAgainst() {
	deployed := twice.NewRegistry()
	twice.MustRegister(deployed, twice.HandlerFunc[InvoiceSend](func(context.Context, *twice.Job[InvoiceSend]) error { return nil }), nil)
	schema := deployed.ArgsSchema()
	schema.Binary = "./worker-deployed"

	next := twice.NewRegistry()
	twice.MustRegister(next, twice.HandlerFunc[InvoiceSendNext](func(context.Context, *twice.Job[InvoiceSendNext]) error { return nil }), nil)
	rep, err := next.CheckArgsAgainst(schema)
	if err != nil {
		panic(err)
	}
	fmt.Println(rep.Kinds[0].Verdict)
	fmt.Println(rep.Kinds[0].Summary())
	fmt.Println(errors.Is(rep.Err(), twice.ErrArgsIncompatible))
	// Output:
	// incompatible
	// field "currency" was removed or renamed, but binary ./worker-deployed has it; field "currency_code" was added (string)
	// true
}
