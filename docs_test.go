package twice_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocsSayWhatTheCodeDoes (issue 20 #17) reads the README and the
// example programs for the mistakes users copy: a program that exits after
// Stop leaves a running job running until its lease expires, spending its
// attempt (Shutdown puts it back); the stock binary refuses 'twice serve',
// so no line may tell users to run it with a flag; and the browser tests
// need Chromium, which the README must say.
func TestDocsSayWhatTheCodeDoes(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for i, block := range regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1) {
		if strings.Contains(block[1], ".Stop(") {
			t.Errorf("README Go block %d calls Stop; a program told to exit calls Shutdown(ctx, grace):\n%s", i+1, block[1])
		}
	}
	programs, err := filepath.Glob(filepath.Join("examples", "*", "main.go"))
	if err != nil || len(programs) == 0 {
		t.Fatalf("no example programs found: %v", err)
	}
	for _, p := range programs {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(src), ".Stop(") {
			t.Errorf("%s calls Stop before it exits; call Shutdown(ctx, grace)", p)
		}
	}
	if m := regexp.MustCompile(`twice\s+serve\s+--[a-z]+`).FindString(string(readme)); m != "" {
		t.Errorf("README tells users to run %q, which the stock binary refuses", m)
	}
	if !strings.Contains(string(readme), "apt-get install -y chromium") {
		t.Error("README does not say the browser tests need Chromium, nor how to install it")
	}
}
