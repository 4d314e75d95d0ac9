package twicepg

import (
	"strings"
	"testing"
)

// TestServerVersionProblem: a server older than 13 is refused with what
// to do; 13 and later are not.
func TestServerVersionProblem(t *testing.T) {
	t.Parallel()
	err := serverVersionProblem(120017, "12.17")
	if err == nil || !strings.Contains(err.Error(), "PostgreSQL 12.17") || !strings.Contains(err.Error(), "13 or later") {
		t.Errorf("serverVersionProblem(12.17) = %v, want a refusal naming 12.17 and 13 or later", err)
	}
	for _, ok := range []int{130000, 150020, 170002} {
		if err := serverVersionProblem(ok, "x"); err != nil {
			t.Errorf("serverVersionProblem(%d) = %v, want nil", ok, err)
		}
	}
}
