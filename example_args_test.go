package twice_test

import (
	"context"
	"fmt"

	"github.com/twicejobs/twice"
)

// PasswordReset carries IDs only. A token count is not a token, and the
// e-mail address is loaded by its ID when the job runs.
type PasswordReset struct {
	UserID     int64  `json:"user_id"`
	EmailID    int64  `json:"email_id"`
	TokenCount int    `json:"token_count"`
	Locale     string `json:"locale"`
}

func (PasswordReset) Kind() string { return "auth.password-reset.v1" }

// A tool without the Go type (a CLI, an admin page) checks raw JSON args
// against a kind's fields as the kind catalog describes them; with no field
// list, only the name rule applies to the keys.
func ExampleCheckArgsJSON() {
	reg := twice.NewRegistry()
	err := twice.Register(reg, twice.HandlerFunc[PasswordReset](func(_ context.Context, _ *twice.Job[PasswordReset]) error {
		return nil // load the address by job.Args.EmailID, mint a token, send
	}), nil)
	fmt.Println("register:", err)
	fields, _ := reg.ArgFields("auth.password-reset.v1")
	for _, raw := range []string{
		`{"user_id": 42, "email_id": 7, "locale": "nl"}`,
		`{"user_id": 42, "password": "hunter2"}`,
		`{"user_id": "42"}`,
	} {
		fmt.Println(twice.CheckArgsJSON("auth.password-reset.v1", []byte(raw), fields, 0))
	}
	fmt.Println(twice.CheckArgsJSON("auth.password-reset.v1", []byte(`{"user_id": 42, "email": "a@example.com"}`), nil, 0))
	// Output:
	// register: <nil>
	// <nil>
	// invalid job args: args of kind "auth.password-reset.v1": unknown field "password": the kind's fields are user_id, email_id, token_count, locale
	// invalid job args: args of kind "auth.password-reset.v1": field "user_id" is string, want integer
	// invalid job args: args of kind "auth.password-reset.v1": key "email" looks like personal data ("email"): args are stored and shown as plaintext, so pass an ID and let the handler load or regenerate the value
}
