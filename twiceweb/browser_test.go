package twiceweb_test

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/twicejobs/twice/internal/testkit/waitfor"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
	"github.com/twicejobs/twice/twiceweb"
)

// chromiumPath is Debian's Chromium, which .ci/run installs.
const chromiumPath = "/usr/bin/chromium"

// newChrome starts a headless Chromium for the test and returns a tab's
// context. Without Chromium the test is skipped locally, but fails where
// TWICE_TEST_POSTGRES is set (CI), so browser tests never silently vanish
// there.
func newChrome(t *testing.T) context.Context {
	t.Helper()
	path := chromiumPath
	if _, err := os.Stat(path); err != nil {
		if p, lerr := exec.LookPath("chromium"); lerr == nil {
			path = p
		} else if os.Getenv("TWICE_TEST_POSTGRES") != "" {
			t.Fatalf("chromium is not installed (%v); install it with apt-get install -y chromium", err)
		} else {
			t.Skip("chromium is not installed; the browser tests run in CI (apt-get install -y chromium)")
		}
	}
	// Without the background-networking flags Chromium's own connections
	// get refused on a closed network and slow every page down.
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// do runs browser steps with a timeout, failing the test on error.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func run[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// screenshot saves the page as a test artifact in $TWICE_SCREENSHOTS, or
// in the test's temporary directory.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("TWICE_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	png := run(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

func TestBrowser(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start()
	dead := []int64{e.dead(1), e.dead(2)}
	for i := range 3 {
		id := e.enqueue(okArgs{N: i})
		e.await("ok job to complete", func() bool { return e.state(id) == twicetype.JobStateCompleted })
	}
	e.await("two skipped ticks", func() bool {
		res, err := e.store.ScheduleTicks(t.Context(), &twicestore.ScheduleTicksParams{Name: "money-sweep"})
		return err == nil && len(res.Ticks) >= 2
	})
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := e.client.Stop(stopCtx); err != nil { // a still store: the page and the store must agree
		t.Fatal(err)
	}
	cancel()
	srv := httptest.NewServer(e.handler(twiceweb.Options{RefreshInterval: -1}))
	defer srv.Close()
	ctx := newChrome(t)

	t.Run("overview matches the store", func(t *testing.T) {
		do(t, ctx, "open overview", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS(".chart")))
		counts, err := e.store.JobCount(t.Context(), &twicestore.JobCountParams{})
		if err != nil {
			t.Fatal(err)
		}
		want := map[twicetype.JobState]int{}
		for _, c := range counts.Counts {
			want[c.State] += c.Count
		}
		for _, s := range twicetype.AllJobStates {
			got := run(t, ctx, "read count", chromedp.Text(chromedp.CSS(`[data-count="`+string(s)+`"]`)))
			if got != strconv.Itoa(want[s]) {
				t.Errorf("overview shows %s %s, the store has %d", got, s, want[s])
			}
		}
		if got := run(t, ctx, "read hour", chromedp.Text(chromedp.CSS(`[data-count="hour-completed"]`))); got != strconv.Itoa(want[twicetype.JobStateCompleted]) {
			t.Errorf("last hour shows %s completed, the store has %d", got, want[twicetype.JobStateCompleted])
		}
		screenshot(t, ctx, "overview")
	})

	t.Run("every page renders", func(t *testing.T) {
		for _, p := range []struct{ name, path, sel string }{
			{"jobs", "/jobs", "table.jobs"},
			{"job", "/jobs/" + strconv.FormatInt(dead[0], 10), "#args"},
			{"dead", "/dead", "#retry-all"},
			{"recurring", "/recurring", `[data-ticks="money-sweep"] .outcome-skipped`},
			{"switches", "/switches", "table.switches"},
			{"orphans", "/orphans", "table"},
			{"markers", "/markers?handler=web.ok.v1&key=k", "#marker-result"},
		} {
			do(t, ctx, "open "+p.name, chromedp.Navigate(srv.URL+p.path), chromedp.WaitVisible(chromedp.CSS(p.sel)))
			screenshot(t, ctx, p.name)
		}
	})

	t.Run("retrying a dead job moves it back to the queue", func(t *testing.T) {
		id := strconv.FormatInt(dead[0], 10)
		do(t, ctx, "retry from the dead letters",
			chromedp.Navigate(srv.URL+"/dead"),
			chromedp.Click(chromedp.CSS(`button[data-retry="`+id+`"]`)),
			chromedp.WaitVisible(chromedp.ID("confirm")),
		)
		screenshot(t, ctx, "confirm-retry")
		if s := e.state(dead[0]); s != twicetype.JobStateDead {
			t.Fatalf("job is %s before the retry was confirmed", s)
		}
		do(t, ctx, "confirm", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("job-state")))
		if s := run(t, ctx, "read state", chromedp.Text(chromedp.ID("job-state"))); s != "available" {
			t.Errorf("the job page shows %q after the retry, want available", s)
		}
		j, err := e.store.JobGet(t.Context(), &twicestore.JobGetParams{ID: dead[0]})
		if err != nil {
			t.Fatal(err)
		}
		if j.State != twicetype.JobStateAvailable || j.Attempt != 0 || len(j.Errors) == 0 {
			t.Errorf("after the retry the job is %s, attempt %d, %d errors; want available, 0, its history kept", j.State, j.Attempt, len(j.Errors))
		}
	})

	t.Run("a POST without CSRF token is refused", func(t *testing.T) {
		do(t, ctx, "open switches", chromedp.Navigate(srv.URL+"/switches"), chromedp.WaitVisible(chromedp.CSS("table.switches")))
		status := run(t, ctx, "post without token", chromedp.Evaluate[int](
			`fetch("/switches/set", {method: "POST", body: new URLSearchParams({kind: "web.ok.v1", state: "off", reason: "forged"})}).then(r => r.status)`,
			chromedp.EvalAwaitPromise))
		if status != 403 {
			t.Errorf("POST without a CSRF token: %d, want 403", status)
		}
		res, err := e.store.ToggleList(t.Context(), &twicestore.ToggleListParams{})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Toggles) != 0 {
			t.Errorf("the refused POST stored a switch: %+v", res.Toggles)
		}
	})

	t.Run("flipping a kill switch holds the kind's next job", func(t *testing.T) {
		do(t, ctx, "switch web.ok.v1 off",
			chromedp.Navigate(srv.URL+"/switches"),
			chromedp.SendKeys(chromedp.CSS(`tr[data-kind="web.ok.v1"] input[name="reason"]`), "incident 42: smtp down"),
			chromedp.Click(chromedp.CSS(`button[data-flip="web.ok.v1"]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-state="web.ok.v1"].sw-off`)),
		)
		screenshot(t, ctx, "switches-off")
		// A worker started now reads the switch at start: its first fetch
		// already leaves the kind out.
		e.start()
		held := e.enqueue(okArgs{N: 100})
		e.dead(3) // a job of another kind, enqueued later, has run meanwhile
		j, err := e.store.JobGet(t.Context(), &twicestore.JobGetParams{ID: held})
		if err != nil {
			t.Fatal(err)
		}
		if j.State != twicetype.JobStateAvailable || j.Attempt != 0 {
			t.Fatalf("the switched-off kind's job is %s at attempt %d; want it held, available at attempt 0", j.State, j.Attempt)
		}
		do(t, ctx, "reload switches", chromedp.Navigate(srv.URL+"/switches"), chromedp.WaitVisible(chromedp.CSS("table.switches")))
		if got := run(t, ctx, "read waiting", chromedp.Text(chromedp.CSS(`[data-waiting="web.ok.v1"]`))); got != "1 held" {
			t.Errorf("the switches page shows %q waiting for the switched-off kind, want 1 held", got)
		}
		screenshot(t, ctx, "switches-held")
		do(t, ctx, "switch web.ok.v1 on again",
			chromedp.SendKeys(chromedp.CSS(`tr[data-kind="web.ok.v1"] input[name="reason"]`), "incident 42 resolved"),
			chromedp.Click(chromedp.CSS(`button[data-flip="web.ok.v1"]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-state="web.ok.v1"].sw-on`)),
		)
		e.await("the held job to run once switched on", func() bool { return e.state(held) == twicetype.JobStateCompleted })
		if logs := e.logs.String(); !strings.Contains(logs, `reason="incident 42: smtp down"`) {
			t.Errorf("the flip was not logged with its reason:\n%s", logs)
		}
	})

	t.Run("open pages refresh themselves", func(t *testing.T) { testLiveRefresh(t, e, ctx) })
}

// testLiveRefresh opens the overview of a dashboard that refreshes often,
// completes one more job, and waits for the page to show it without a
// reload.
func testLiveRefresh(t *testing.T, e *env, ctx context.Context) {
	live := httptest.NewServer(e.handler(twiceweb.Options{RefreshInterval: 200 * time.Millisecond}))
	defer live.Close()
	sel := chromedp.CSS(`[data-count="completed"]`)
	// Read in one evaluation: the refresh may replace the node between a
	// query and a read of it.
	read := chromedp.Evaluate[string](`(document.querySelector('[data-count="completed"]') || {}).textContent || ""`)
	do(t, ctx, "open live overview", chromedp.Navigate(live.URL+"/"), chromedp.WaitVisible(sel))
	before, err := strconv.Atoi(strings.TrimSpace(run(t, ctx, "read completed", read)))
	if err != nil {
		t.Fatal(err)
	}
	id := e.enqueue(okArgs{N: 200})
	e.await("job to complete", func() bool { return e.state(id) == twicetype.JobStateCompleted })
	want := strconv.Itoa(before + 1)
	var got string
	waitfor.Cond(t, fmt.Sprintf("the open overview to show %s completed", want), func() bool {
		got = strings.TrimSpace(run(t, ctx, "read completed", read))
		return got == want
	}, func() string { return got + " completed" })
}

func TestBrowserRefusedWithoutAuth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h := e.handler(twiceweb.Options{BearerToken: "s3cret"})
	ln, err := twiceweb.Listen("0.0.0.0:0", h)
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- twiceweb.Serve(sctx, ln, h) }()
	t.Cleanup(func() { // after the browser's cleanup: cleanups run last first
		cancel()
		if err := waitfor.Recv(t, done, "Serve to return after shutdown"); err != nil {
			t.Errorf("Serve after shutdown: %v", err)
		}
	})
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ctx := newChrome(t)
	resp := run(t, ctx, "open dashboard", chromedp.NavigateResponse("http://"+nonLoopbackIP(t)+":"+port+"/"))
	if resp.Status != 401 {
		t.Errorf("unauthenticated dashboard request: %d, want 401", resp.Status)
	}
	if body := run(t, ctx, "read body", chromedp.Text(chromedp.CSS("body"))); !strings.Contains(body, "401 unauthorized") {
		t.Errorf("page shows %q, want the 401 message", body)
	}
	screenshot(t, ctx, "unauthorized")
}

// nonLoopbackIP returns an address of this machine other than loopback,
// or 127.0.0.1 when it has none (the listener is on every interface
// either way).
func nonLoopbackIP(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return "127.0.0.1"
}
