// Package convergence shows how a team proves its handler converges with
// twicetest: welcome.go is production code (the kind and its registration,
// as the worker's main calls it), welcome_test.go hands that same
// registration to twicetest.RunTwice, which delivers the message in a row,
// concurrently and across a crash, on a real store, and fails the test if
// the effect count breaks what the strategy promises.
//
//	go test ./examples/convergence -v
package convergence

import (
	"context"
	"fmt"

	"github.com/twicejobs/twice"
)

// Mailer sends emails; the worker passes the real one, the test a counter.
type Mailer interface {
	Send(ctx context.Context, userID int64, template string) error
}

// WelcomeEmail is the job's args.
type WelcomeEmail struct {
	UserID int64 `json:"user_id"`
}

// Kind names the job.
func (WelcomeEmail) Kind() string { return "email.welcome.v1" }

// IdempotencyKey makes every message for one user one email: markers are
// claimed under it.
func (a WelcomeEmail) IdempotencyKey() string { return fmt.Sprintf("welcome-%d", a.UserID) }

// Register registers the kind as production runs it. An email is
// ClaimAfter: a crash between the send and the claim costs a duplicate,
// never a lost email.
func Register(reg *twice.Registry, m Mailer) error {
	return twice.Register(reg, twice.HandlerFunc[WelcomeEmail](func(ctx context.Context, job *twice.Job[WelcomeEmail]) error {
		return m.Send(ctx, job.Args.UserID, "welcome")
	}), &twice.KindOpts{Strategy: twice.ClaimAfter})
}
