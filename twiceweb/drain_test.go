package twiceweb_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twiceweb"
)

func TestKindDrainPage(t *testing.T) {
	t.Parallel()
	testKindDrainPage(t, newEnv(t))
}

func TestPostgresKindDrainPage(t *testing.T) {
	t.Parallel()
	testKindDrainPage(t, newPostgresEnv(t))
}

// testKindDrainPage (issue 25 item 4): a kind's drain page shows what
// holds it and the verdict; the switches page, where every known kind is
// listed, links to it; an unknown kind is a 400 naming the closest one.
func testKindDrainPage(t *testing.T, e *env) {
	srv := httptest.NewServer(e.handler(twiceweb.Options{}))
	defer srv.Close()
	b := newBrowser(t, srv.URL)

	// A retired version only its jobs remember: one waits.
	id := e.insertJob("web.old.v1", "default", `{"n": 1}`)
	status, body := b.get("/kinds/web.old.v1/drain")
	want := fmt.Sprintf("1 waiting (job %d)", id)
	if status != http.StatusOK || !strings.Contains(body, `data-verdict="not-safe"`) || !strings.Contains(body, want) ||
		!strings.Contains(body, fmt.Sprintf(`href="/jobs/%d"`, id)) || !strings.Contains(body, `data-count="waiting">1<`) {
		t.Fatalf("drain page of a kind with a waiting job: %d, want not safe with %q:\n%s", status, want, body)
	}
	c, err := twice.NewClient(e.store, twice.Config{Registry: e.reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.JobCancel(t.Context(), &twice.JobActionParams{IDs: []int64{id}, By: "test", Reason: "retired"}); err != nil {
		t.Fatal(err)
	}
	if status, body = b.get("/kinds/web.old.v1/drain"); status != http.StatusOK || !strings.Contains(body, `data-verdict="safe"`) ||
		!strings.Contains(body, "safe to remove") {
		t.Fatalf("drain page once the last job is cancelled: %d, want safe:\n%s", status, body)
	}

	// A schedule this binary defines holds its kind.
	if _, body = b.get("/kinds/web.money.v1/drain"); !strings.Contains(body, "not safe") || !strings.Contains(body, "1 schedule enqueues it (money-sweep)") {
		t.Errorf("drain page of a scheduled kind does not name the schedule:\n%s", body)
	}
	if _, body = b.get("/switches"); !strings.Contains(body, `href="/kinds/web.ok.v1/drain"`) {
		t.Errorf("the switches page does not link each kind's drain page")
	}
	if status, body = b.get("/kinds/web.olb.v1/drain"); status != http.StatusBadRequest || !strings.Contains(body, "did you mean web.old.v1?") {
		t.Errorf("drain page of an unknown kind: %d, want 400 with did you mean:\n%s", status, body)
	}
}

// TestBrowserKindDrain follows the switches page's drain link in a real
// browser and reads the verdict.
func TestBrowserKindDrain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	srv := httptest.NewServer(e.handler(twiceweb.Options{RefreshInterval: -1}))
	defer srv.Close()
	ctx := newChrome(t)
	do(t, ctx, "open the drain page from the switches page",
		chromedp.Navigate(srv.URL+"/switches"),
		chromedp.Click(chromedp.CSS(`a[data-drain="web.ok.v1"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-verdict]`)),
	)
	if s := run(t, ctx, "read the verdict", chromedp.Text(chromedp.CSS(`[data-verdict]`))); s != "safe to remove" {
		t.Errorf("the drain page of an idle kind says %q, want safe to remove", s)
	}
}
