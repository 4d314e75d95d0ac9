package toggles

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twicejobs/twice/internal/testkit/waitfor"
)

// testDebounce keeps the tests quick while still exercising the debounce.
const testDebounce = 10 * time.Millisecond

// watchRig is one running Watch and what its callbacks reported.
type watchRig struct {
	t     *testing.T
	dir   string
	path  string
	loads chan map[string]bool
	errs  chan error
}

// setup makes a directory for the toggles file; write the initial file (or
// not) and then call start.
func setup(t *testing.T) *watchRig {
	t.Helper()
	dir := t.TempDir()
	return &watchRig{
		t:     t,
		dir:   dir,
		path:  filepath.Join(dir, "toggles.toml"),
		loads: make(chan map[string]bool, 64),
		errs:  make(chan error, 64),
	}
}

// start runs Watch until the test ends, and checks it then returns nil.
func (r *watchRig) start() {
	r.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, r.path, testDebounce,
			func(m map[string]bool) {
				select {
				case r.loads <- m:
				case <-ctx.Done():
				}
			},
			func(err error) {
				select {
				case r.errs <- err:
				case <-ctx.Done():
				}
			})
	}()
	r.t.Cleanup(func() {
		cancel()
		if err := waitfor.Recv(r.t, done, "Watch to return after cancel"); err != nil {
			r.t.Errorf("Watch returned %v after cancel, want nil", err)
		}
	})
}

// nextLoad returns the next onLoad. An onError first fails the test unless
// errorsOK, in which case it stays in r.errs (buffered) for the caller to
// drop.
func (r *watchRig) nextLoad(errorsOK bool) map[string]bool {
	r.t.Helper()
	if errorsOK {
		return waitfor.Recv(r.t, r.loads, "an onLoad")
	}
	return waitfor.RecvBefore(r.t, r.loads, r.errs, "an onLoad (the stop is an onError)", nil)
}

// awaitLoad waits for an onLoad of want, skipping earlier loads: an edit in
// place is a truncate and a write, and a reload may fall between the two.
func (r *watchRig) awaitLoad(want map[string]bool) {
	r.t.Helper()
	var last map[string]bool
	waitfor.Match(r.t, r.loads, r.errs, func(m map[string]bool) bool {
		last = m
		return maps.Equal(m, want)
	}, fmt.Sprintf("onLoad(%v) (the stop is an onError)", want), func() string { return fmt.Sprintf("onLoad(%v)", last) })
}

// nextError returns the next onError.
func (r *watchRig) nextError() error {
	r.t.Helper()
	return waitfor.Recv(r.t, r.errs, "an onError")
}

// writeInPlace overwrites the file the way a plain editor or echo > does.
func (r *watchRig) writeInPlace(content string) {
	r.t.Helper()
	if err := os.WriteFile(r.path, []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// replace writes a temporary file and renames it over the toggles file,
// the way vim, config management and kubectl cp do: the file is a new inode.
func (r *watchRig) replace(content string) {
	r.t.Helper()
	f, err := os.CreateTemp(r.dir, ".toggles-*.tmp")
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := f.WriteString(content); err != nil {
		r.t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		r.t.Fatal(err)
	}
	if err := os.Rename(f.Name(), r.path); err != nil {
		r.t.Fatal(err)
	}
}

const (
	fileAOff     = "[toggles]\n\"a.v1\" = false\n"
	fileAOn      = "[toggles]\n\"a.v1\" = true\n"
	fileAOnBOff  = "[toggles]\n\"a.v1\" = true\n\"B.v1\" = false\n"
	fileMalform  = "[toggles]\n\"a.v1\" = true\n\"b.v1\" = \"off\"\n"
	fileBadTOML  = "[toggles\n\"a.v1\" = true\n"
	fileAOffCOff = "[toggles]\n\"a.v1\" = false\n\"c.v1\" = false\n"
)

func TestWatchMissingAtStart(t *testing.T) {
	t.Parallel()
	r := setup(t)
	r.start()
	if m := r.nextLoad(false); m == nil || len(m) != 0 {
		t.Fatalf("missing file at start: onLoad(%v), want an empty map", m)
	}
	r.replace(fileAOff)
	r.awaitLoad(map[string]bool{"a.v1": false})
}

func TestWatchEditInPlace(t *testing.T) {
	t.Parallel()
	r := setup(t)
	r.writeInPlace(fileAOff)
	r.start()
	if m := r.nextLoad(false); !maps.Equal(m, map[string]bool{"a.v1": false}) {
		t.Fatalf("at start: onLoad(%v)", m)
	}
	r.writeInPlace(fileAOnBOff)
	r.awaitLoad(map[string]bool{"a.v1": true, "b.v1": false})
	r.writeInPlace(fileAOff)
	r.awaitLoad(map[string]bool{"a.v1": false})
}

func TestWatchAtomicReplace(t *testing.T) {
	t.Parallel()
	r := setup(t)
	r.writeInPlace(fileAOff)
	r.start()
	r.awaitLoad(map[string]bool{"a.v1": false})
	r.replace(fileAOn)
	r.awaitLoad(map[string]bool{"a.v1": true})
	// Still watching after the file was swapped for a new one, whether
	// replaced again or edited in place.
	r.replace(fileAOnBOff)
	r.awaitLoad(map[string]bool{"a.v1": true, "b.v1": false})
	r.writeInPlace(fileAOffCOff)
	r.awaitLoad(map[string]bool{"a.v1": false, "c.v1": false})
}

func TestWatchDelete(t *testing.T) {
	t.Parallel()
	r := setup(t)
	r.writeInPlace(fileAOff)
	r.start()
	r.awaitLoad(map[string]bool{"a.v1": false})
	if err := os.Remove(r.path); err != nil {
		t.Fatal(err)
	}
	r.awaitLoad(map[string]bool{})
	r.writeInPlace(fileAOn)
	r.awaitLoad(map[string]bool{"a.v1": true})
}

func TestWatchMalformedKeepsLastGood(t *testing.T) {
	t.Parallel()
	r := setup(t)
	r.writeInPlace(fileAOff)
	r.start()
	r.awaitLoad(map[string]bool{"a.v1": false})

	for _, bad := range []struct{ content, want string }{
		{fileMalform, `line 3: toggle "b.v1" is the string "off", not a boolean`},
		{fileBadTOML, "invalid TOML: expected '.' or ']' to end table name"},
	} {
		// Replaced atomically so no reload can see anything but the bad
		// content: every reload until the fix must call onError only.
		r.replace(bad.content)
		err := r.nextError()
		if !strings.Contains(err.Error(), r.path) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("onError(%v): want the file named and %q", err, bad.want)
		}
		select {
		case m := <-r.loads:
			t.Fatalf("onLoad(%v) for a malformed file", m)
		default:
		}

		// The first onLoad after the bad edit is the fixed file: nothing
		// was loaded from the bad one, before or after its error.
		r.replace(fileAOffCOff)
		if m := r.nextLoad(true); !maps.Equal(m, map[string]bool{"a.v1": false, "c.v1": false}) {
			t.Fatalf("after the fix: onLoad(%v)", m)
		}
		// Callbacks run in order on one goroutine, so any further error
		// from the bad file is already buffered: drop it before the next
		// round, so that round sees only its own.
		for len(r.errs) > 0 {
			err := <-r.errs
			t.Logf("dropped a buffered error of the bad file: %v", err)
		}
	}
}

func TestWatchMalformedAtStart(t *testing.T) {
	t.Parallel()
	r := setup(t)
	r.writeInPlace(fileMalform)
	r.start()
	if err := r.nextError(); !strings.Contains(err.Error(), `line 3: toggle "b.v1" is the string "off"`) {
		t.Errorf("onError(%v)", err)
	}
	r.replace(fileAOn)
	if m := r.nextLoad(true); !maps.Equal(m, map[string]bool{"a.v1": true}) {
		t.Fatalf("after the fix: onLoad(%v)", m)
	}
}

// TestWatchSymlinkSwap follows a Kubernetes ConfigMap volume: the file is a
// symlink through "..data", and an update swaps "..data" to a new
// directory with a rename, never touching a file named toggles.toml.
func TestWatchSymlinkSwap(t *testing.T) {
	t.Parallel()
	r := setup(t)
	version := func(name, content string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(r.dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(r.dir, name, "toggles.toml"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(r.dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(r.dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..v1", fileAOff)
	if err := os.Symlink(filepath.Join("..data", "toggles.toml"), r.path); err != nil {
		t.Fatal(err)
	}
	r.start()
	r.awaitLoad(map[string]bool{"a.v1": false})
	version("..v2", fileAOnBOff)
	r.awaitLoad(map[string]bool{"a.v1": true, "b.v1": false})
}

func TestWatchMissingDirectory(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "nope", "toggles.toml")
	err := Watch(context.Background(), path, 0,
		func(m map[string]bool) { t.Errorf("onLoad(%v)", m) },
		func(err error) { t.Errorf("onError(%v)", err) })
	if err == nil || !strings.Contains(err.Error(), "create the directory or fix the path") {
		t.Fatalf("Watch = %v, want an error saying what to do", err)
	}
}
