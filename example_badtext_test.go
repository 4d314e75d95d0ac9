package twice_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twicejobs/twice"
)

// Free text an admin call takes (a reason, who acts, a name, a filter) is
// refused as bad input, on every driver alike, when it holds a NUL byte or
// bytes that are not UTF-8, or is over its cap; nothing is stored.
func ExampleClient_ToggleSet_badText() {
	client, done := exampleAdminClient()
	defer done()
	ctx := context.Background()

	for _, reason := range []string{"pasted\x00from a binary", strings.Repeat("why ", 300)} {
		err := client.ToggleSet(ctx, &twice.ToggleSetParams{
			Kind: WelcomeEmail{}.Kind(), By: "ops@example.com", Reason: reason,
		})
		fmt.Println(errors.Is(err, twice.ErrInvalidInput), err)
	}
	switches, _ := client.ToggleList(ctx)
	fmt.Println("stored switches:", len(switches))
	// Output:
	// true twice: set kill switch: reason "pasted\x00from a binary" contains a NUL byte: remove it
	// true twice: set kill switch: reason "why why why why why why why why why why "… is 1200 bytes, over the 1024-byte limit: use a shorter one
	// stored switches: 0
}
