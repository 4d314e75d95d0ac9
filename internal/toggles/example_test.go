package toggles_test

import (
	"fmt"
	"time"

	"github.com/twicejobs/twice/internal/toggles"
	"github.com/twicejobs/twice/twicetype"
)

func Example() {
	file, err := toggles.ParseFile([]byte(`
[toggles]
"email.partner-verification.v1" = true
"Legacy.Partner-Benfits.v1" = false
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	store := []twicetype.Toggle{{
		Kind: "balance.credit.v1", Enabled: false, Reason: "ledger drift", By: "ops@host",
		At: time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC),
	}}
	set := toggles.NewSet(file, store)

	registered := []string{"balance.credit.v1", "email.partner-verification.v1", "legacy.partner-benefits.v1"}
	for _, u := range toggles.Unknown(set.Keys(), registered) {
		fmt.Println(u)
	}
	fmt.Println(set.Decide("balance.credit.v1", false))
	fmt.Println(set.Decide("email.partner-verification.v1", true))
	fmt.Println(set.Decide("legacy.partner-benefits.v1", false))
	// Output:
	// toggle key "legacy.partner-benfits.v1" names no registered kind; did you mean legacy.partner-benefits.v1?
	// balance.credit.v1 off (store by ops@host at 2026-01-02T15:04:05Z: "ledger drift")
	// email.partner-verification.v1 on (file)
	// legacy.partner-benefits.v1 on (default)
}
