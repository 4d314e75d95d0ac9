package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twicejobs/twice/internal/testkit/waitfor"
)

const (
	ciToken   = "0123456789abcdef0123456789abcdef"                 // 32 bytes: the shortest accepted
	bareToken = "fedcba9876543210fedcba9876543210fedcba9876543210" // named by its hash
	envToken  = "aaaabbbbccccddddeeeeffff0000111122223333"
)

// writeTokenFile writes text to a token file and returns its path.
func writeTokenFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "api-tokens")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startDashboard runs the stock 'twice dashboard' with args until the
// test ends, and returns its base URL and what it printed so far.
func startDashboard(t *testing.T, db string, args ...string) (base, stdout string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	out := &syncBuffer{wait: "dashboard: http://", seen: make(chan struct{})}
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, Options{Demo: DemoCommand}, append([]string{"dashboard", "--db", db, "--addr", "127.0.0.1:0"}, args...), out, &stderr)
	}()
	t.Cleanup(func() {
		cancel()
		if code := waitfor.Recv(t, done, "the dashboard to stop"); code != ExitOK {
			t.Errorf("dashboard exited %d, want 0\n%s", code, stderr.String())
		}
	})
	waitfor.RecvBefore(t, out.seen, done, "the dashboard to start", func() string { return out.String() + stderr.String() })
	return dashboardURL.FindStringSubmatch(out.String())[1], out.String()
}

// postJob posts an enqueue of a kind no catalog knows (forced: the stock
// binary registers none) with token, and returns the status and body.
func postJob(t *testing.T, base, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"api/v1/jobs",
		strings.NewReader(`{"kind":"report.build.v1","args":{"report_id":9},"force":true,"delay":"1h"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }() // read to the end below
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

// TestDashboardAPITokenFile: 'twice dashboard --api-token-file' takes
// enqueues from a caller with one of the file's tokens, named or bare,
// and refuses a wrong token or none.
func TestDashboardAPITokenFile(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	file := writeTokenFile(t, "# the JSON API's callers\n\nci "+ciToken+"\r\n\t"+bareToken+"  \n# retired: old 0000\n")
	base, stdout := startDashboard(t, s.db, "--api-token-file", file)
	sum := sha256.Sum256([]byte(bareToken))
	if want := "take 2 token(s): ci, token-" + hex.EncodeToString(sum[:4]); !strings.Contains(stdout, want) {
		t.Errorf("the dashboard printed %q, want it to name its tokens: %q", stdout, want)
	}
	for _, tok := range []string{ciToken, bareToken} {
		if code, body := postJob(t, base, tok); code != http.StatusCreated || !strings.Contains(body, `"kind":"report.build.v1"`) {
			t.Errorf("POST /api/v1/jobs with a token of the file: %d %s", code, body)
		}
	}
	for _, tok := range []string{"", envToken, ciToken + "x"} {
		if code, body := postJob(t, base, tok); code != http.StatusUnauthorized || !strings.Contains(body, "token") {
			t.Errorf("POST /api/v1/jobs with token %q: %d %s, want 401", tok, code, body)
		}
	}
	if r := s.ok("jobs"); strings.Count(r.stdout, "report.build.v1") != 2 {
		t.Errorf("want the 2 accepted jobs stored:\n%s", r.stdout)
	}
}

// TestDashboardAPITokensEnv: TWICE_API_TOKENS adds its tokens to the
// file's. Not parallel: it sets the environment.
func TestDashboardAPITokensEnv(t *testing.T) {
	s := newSetup(t)
	t.Setenv(apiTokensEnv, " deploy "+envToken+" ,, "+bareToken)
	base, stdout := startDashboard(t, s.db, "--api-token-file", writeTokenFile(t, "ci "+ciToken+"\n"))
	if !strings.Contains(stdout, "take 3 token(s): ci, deploy, token-") {
		t.Errorf("the dashboard printed %q, want the file's and the environment's tokens", stdout)
	}
	for _, tok := range []string{ciToken, envToken, bareToken} {
		if code, body := postJob(t, base, tok); code != http.StatusCreated {
			t.Errorf("POST /api/v1/jobs: %d %s", code, body)
		}
	}
	if code, _ := postJob(t, base, strings.Repeat("z", 40)); code != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d, want 401", code)
	}

	// Without the file the environment's tokens are the list.
	base, _ = startDashboard(t, s.db)
	if code, body := postJob(t, base, envToken); code != http.StatusCreated {
		t.Errorf("POST /api/v1/jobs with the environment's token only: %d %s", code, body)
	}
	if code, _ := postJob(t, base, ciToken); code != http.StatusUnauthorized {
		t.Errorf("the file's token, file not given: %d, want 401", code)
	}

	// A bad environment stops the dashboard as a bad file does.
	for env, want := range map[string]string{
		" , ,":                      "TWICE_API_TOKENS holds no API token",
		"short":                     "TWICE_API_TOKENS, entry 1: the token is 5 bytes, under 32",
		envToken + ",x " + envToken: "given twice (TWICE_API_TOKENS, entry 1 and TWICE_API_TOKENS, entry 2)",
	} {
		t.Setenv(apiTokensEnv, env)
		r := runStock(t, t.Context(), "dashboard", "--db", s.db, "--addr", "127.0.0.1:0")
		wantError(t, r, ExitUsage, want)
	}
}

// TestDashboardAPITokenBadInput: a token file the dashboard cannot use
// stops it before it serves, with one line saying what to do; a token
// never appears in the message.
func TestDashboardAPITokenBadInput(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	dir := t.TempDir()
	unreadable := writeTokenFile(t, "ci "+ciToken+"\n")
	if err := os.Chmod(unreadable, 0); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, path string
		wants      []string
	}{
		{"missing file", filepath.Join(dir, "nope"), []string{"--api-token-file", "no such file: give the path of a file"}},
		{"a directory", dir, []string{"cannot read it", "give a readable file"}},
		{"empty file", writeTokenFile(t, ""), []string{"holds no API token: give one a line", "openssl rand -hex 32"}},
		{"only comments", writeTokenFile(t, "# ci\n\n   \n"), []string{"holds no API token"}},
		{"short token", writeTokenFile(t, "ci 0123456789abcdef\n"), []string{"line 1: the token is 16 bytes, under 32", "openssl rand -hex 32"}},
		{"white space in token", writeTokenFile(t, "# x\nci 0123456789abcdef 0123456789abcdef\n"), []string{"line 2: 3 words: give TOKEN or NAME TOKEN"}},
		{"control character", writeTokenFile(t, "ci 0123456789abcdef\x070123456789abcdef\n"), []string{"line 1: the token holds the byte 0x07 at byte 16", "printable ASCII"}},
		{"not ASCII", writeTokenFile(t, "cï "+ciToken+"\n"), []string{"line 1: the name holds the byte 0xc3"}},
		{"name twice", writeTokenFile(t, "ci "+ciToken+"\nci "+bareToken+"\n"), []string{`name "ci" is given twice`, "line 1 and", "line 2"}},
		{"token twice", writeTokenFile(t, "ci "+ciToken+"\nops "+ciToken+"\n"), []string{"one API token is given twice"}},
		{"reserved name", writeTokenFile(t, "bearer-token "+ciToken+"\n"), []string{`"bearer-token" is the one --token acts under`}},
	}
	if os.Geteuid() != 0 { // root reads any file
		cases = append(cases, struct {
			name, path string
			wants      []string
		}{"unreadable file", unreadable, []string{"permission denied: make the file readable"}})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runStock(t, t.Context(), "dashboard", "--db", s.db, "--addr", "127.0.0.1:0", "--api-token-file", tc.path)
			wantError(t, r, ExitUsage, tc.wants...)
			if strings.Contains(r.stdout, "dashboard: http://") {
				t.Errorf("the dashboard started: %s", r.stdout)
			}
			for _, tok := range []string{ciToken, bareToken, "0123456789abcdef"} {
				if strings.Contains(r.stderr, tok) {
					t.Errorf("the message shows a token: %s", r.stderr)
				}
			}
		})
	}
	// serve and demo take the same flag under their --dashboard prefix;
	// the demo logs its worker's start before its dashboard refuses.
	r := runStock(t, t.Context(), "demo", "--db", filepath.Join(dir, "demo.db"), "--dashboard", "127.0.0.1:0",
		"--dashboard-api-token-file", writeTokenFile(t, "\n"))
	if r.code != ExitUsage || !strings.Contains(r.stderr, "twice: --dashboard-api-token-file") || !strings.Contains(r.stderr, "holds no API token") {
		t.Errorf("demo with an empty token file: exit %d, want %d\n%s", r.code, ExitUsage, r.stderr)
	}
}
