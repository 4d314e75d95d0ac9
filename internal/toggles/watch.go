package toggles

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DebounceDefault is how long Watch waits after the last change to the file
// before reloading it: long enough for an editor's write-rename-chmod burst
// to settle, short enough that a flip feels immediate.
const DebounceDefault = 100 * time.Millisecond

// Watch keeps the caller's view of the toggles file at path current until
// ctx is done. It loads the file once at start, then reloads it debounce
// after the last change (zero or less means DebounceDefault):
//
//   - a good file: onLoad with its toggles, keyed by lower-cased kind;
//   - a missing or deleted file: onLoad with an empty map (no file toggles);
//   - an unreadable or malformed file: onError only, never onLoad, so the
//     caller keeps the last good toggles and a bad edit flips nothing. At
//     start there is no last good state: callers that want a bad file to
//     stop the process call LoadFile first.
//
// It watches the directory, not the file, so editors and tools that replace
// the file (write a temporary file and rename it over, or delete and
// create) are followed, as is a Kubernetes ConfigMap's symlink swap; the
// directory itself must exist. The callbacks run on Watch's goroutine, one
// at a time, and should return quickly. Watch returns nil when ctx is done,
// and an error only when the watch cannot be set up.
func Watch(ctx context.Context, path string, debounce time.Duration, onLoad func(map[string]bool), onError func(error)) error {
	if debounce <= 0 {
		debounce = DebounceDefault
	}
	path = filepath.Clean(path)
	dir, base := filepath.Dir(path), filepath.Base(path)

	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch toggles file %s: %w", path, err)
	}
	defer func() { _ = w.Close() }() // a watcher that fails to close has nothing left to tell
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("watch toggles file %s: watch its directory: %w; create the directory or fix the path", path, err)
	}

	// Load only once the watch is in place, so a change made in between is
	// not missed: at worst it is loaded twice.
	target := resolve(path)
	load := func() {
		m, err := LoadFile(path)
		if err != nil {
			onError(err)
			return
		}
		onLoad(m)
	}
	load()

	// The debounce timer is armed by events and disarmed (nil channel)
	// once it fires, so an idle watcher wakes up for nothing.
	timer := time.NewTimer(debounce)
	timer.Stop()
	defer timer.Stop()
	var fire <-chan time.Time
	arm := func() {
		timer.Reset(debounce)
		fire = timer.C
	}

	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("watch toggles file " + path + ": watcher closed")
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			if filepath.Base(ev.Name) == base {
				arm()
				continue
			}
			// A ConfigMap mounts the file as a symlink through a "..data"
			// symlink that is swapped atomically: nothing named base
			// changes, but what it points to does.
			if r := resolve(path); r != target {
				target = r
				arm()
			}
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("watch toggles file " + path + ": watcher closed")
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				arm() // events were lost: the file may have changed
				continue
			}
			onError(fmt.Errorf("watch toggles file %s: %w", path, err))
		case <-fire:
			fire = nil
			target = resolve(path)
			load()
		}
	}
}

// resolve is the file path refers to after following symlinks, or "" when
// there is none (missing file, dangling link).
func resolve(path string) string {
	r, err := filepath.EvalSymlinks(path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return "?" + err.Error()
		}
		return ""
	}
	return r
}
