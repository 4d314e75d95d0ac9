// Command shop is a team's own twice binary, as a new user writes it: two
// kinds of its own, a worker ('shop serve') and the full twice CLI built
// with twicecli. The walk-through test builds it in a fresh module.
package main

import (
	"context"
	"fmt"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicecli"
)

// ChargeInvoice moves money: its kind is fail-closed, off until an
// operator switches it on.
type ChargeInvoice struct {
	InvoiceID int64 `json:"invoice_id"`
}

// Kind implements twice.Args.
func (ChargeInvoice) Kind() string { return "invoice.charge.v1" }

// ResetAccount carries a secret, tagged sensitive: never shown in clear.
type ResetAccount struct {
	AccountID  int64  `json:"account_id"`
	ResetToken string `json:"reset_token" twice:"sensitive"`
}

// Kind implements twice.Args.
func (ResetAccount) Kind() string { return "account.reset.v1" }

func main() {
	reg := twice.NewRegistry()
	twice.MustRegister(reg, twice.HandlerFunc[ChargeInvoice](func(_ context.Context, j *twice.Job[ChargeInvoice]) error {
		fmt.Printf("charged invoice %d\n", j.Args.InvoiceID)
		return nil
	}), &twice.KindOpts{Queue: "invoices", FailClosed: true, MaxAttempts: 5})
	twice.MustRegister(reg, twice.HandlerFunc[ResetAccount](func(ctx context.Context, j *twice.Job[ResetAccount]) error {
		if j.Args.AccountID == 99 { // a reset that hangs until it is cancelled
			fmt.Println("resetting account 99")
			<-ctx.Done()
			return context.Cause(ctx)
		}
		fmt.Printf("reset account %d\n", j.Args.AccountID)
		return nil
	}), &twice.KindOpts{Queue: "accounts"})
	twicecli.New(reg, &twicecli.Options{Config: twice.Config{
		Queues: []twice.QueueConfig{{Name: "invoices", Concurrency: 2}, {Name: "accounts", Concurrency: 2}},
		Observer: twice.ObserverFunc(func(e twice.Event) {
			if e.Type == twice.EventCancelled {
				fmt.Printf("cancelled a running %s job\n", e.Kind)
			}
		}),
	}}).Main()
}
