package twicecli

import "testing"

// TestBinaryName: Main's command line calls itself by the binary's base
// name.
func TestBinaryName(t *testing.T) {
	for arg0, want := range map[string]string{
		"/usr/local/bin/acme-ops": "acme-ops",
		"./shop":                  "shop",
		"shop.exe":                "shop",
		"twice":                   "twice",
		"":                        "twice",
	} {
		if got := binaryName(arg0); got != want {
			t.Errorf("binaryName(%q) = %q, want %q", arg0, got, want)
		}
	}
}
