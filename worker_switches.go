package twice

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twicejobs/twice/internal/logattr"
	"github.com/twicejobs/twice/internal/periodic"
	"github.com/twicejobs/twice/internal/toggles"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// TogglePollIntervalDefault is how often a worker reads the store's switches.
const TogglePollIntervalDefault = time.Second

// toggleFileDebounce is how long the file watcher waits for an editor to
// finish writing before it reloads.
const toggleFileDebounce = 100 * time.Millisecond

// killSwitches is the worker's view of the kill switches: the file's and
// the store's toggles and, from them, which registered kinds may run.
type killSwitches struct {
	registry *Registry
	store    twicestore.Executor
	path     string // the toggles file, if any
	logger   *slog.Logger
	// wake wakes the fetch loop: held jobs of a kind switched on are due.
	wake func()

	mu      sync.RWMutex // guards the three below
	file    map[string]bool
	toggles []twicetype.Toggle // the store's
	enabled map[string]bool    // registered kind -> may run
}

func newKillSwitches(c *Client, wake func()) *killSwitches {
	return &killSwitches{
		registry: c.registry, store: c.store, path: c.cfg.TogglesFile, logger: c.logger, wake: wake,
		file: map[string]bool{}, enabled: map[string]bool{},
	}
}

// loadKillSwitches reads both sources once, before the worker fetches
// anything, so it never runs a kind that is switched off. A file that
// cannot be read or parsed fails the start: with no last good state to
// keep, guessing would not be fail-closed.
func (s *killSwitches) load(ctx context.Context) error {
	if s.path != "" {
		file, err := toggles.LoadFile(s.path)
		if err != nil {
			return fmt.Errorf("kill switch file: %w", err)
		}
		s.file = file
	}
	res, err := s.store.ToggleList(ctx, &twicestore.ToggleListParams{})
	if err != nil {
		return fmt.Errorf("read kill switches: %w", err)
	}
	s.toggles = res.Toggles
	s.apply(ctx, true)
	return nil
}

// applySwitches recomputes which kinds may run, logs each kind whose
// switch moved and every key that names no registered kind, and wakes the
// fetch loop so held jobs of a kind switched on start at once.
func (s *killSwitches) apply(ctx context.Context, first bool) {
	s.mu.Lock()
	set := toggles.NewSet(s.file, s.toggles)
	kinds := s.registry.Kinds()
	next := make(map[string]bool, len(kinds))
	var moved []toggles.Decision
	for _, k := range kinds {
		d := set.Decide(k, s.registry.lookup(k).opts.FailClosed)
		next[k] = d.Enabled
		if old, ok := s.enabled[k]; (first && !d.Enabled) || (ok && old != d.Enabled) {
			moved = append(moved, d)
		}
	}
	changed := !maps.Equal(next, s.enabled)
	s.enabled = next
	s.mu.Unlock()

	logger := s.logger.With(logattr.Component, "killswitch")
	for _, d := range moved {
		if d.Enabled {
			logger.InfoContext(ctx, "kind switched on: its held jobs run again", logattr.Kind, d.Kind, "decision", d.String())
		} else {
			logger.WarnContext(ctx, "kind switched off: its jobs are held, queued and untouched, until it is on again",
				logattr.Kind, d.Kind, "decision", d.String(), "held", s.waitingJobs(ctx, d.Kind))
		}
	}
	if changed && !first {
		s.wake()
	}
}

// warnUnknownToggleKeys logs, loudly, keys of source that name no
// registered kind: they switch nothing, while the operator thinks they do.
func (s *killSwitches) warnUnknown(ctx context.Context, source string, keys []string) {
	for _, u := range toggles.Unknown(keys, s.registry.Kinds()) {
		s.logger.WarnContext(ctx, u.String(), logattr.Component, "killswitch", "source", source)
	}
}

// switchKeys lists every toggle key of both sources.
func (s *killSwitches) keys() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return toggles.NewSet(s.file, s.toggles).Keys()
}

// enabledKinds lists the registered kinds whose switch is on: what the
// fetch loop asks for.
func (s *killSwitches) enabledKinds() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	kinds := make([]string, 0, len(s.enabled))
	for k, on := range s.enabled {
		if on {
			kinds = append(kinds, k)
		}
	}
	slices.Sort(kinds)
	return kinds
}

// kindEnabled is the check the runtime makes before every attempt.
func (s *killSwitches) kindEnabled(kind string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.enabled[kind]
}

// storeSwitchWatcher reads the store's kill switches every
// TogglePollInterval, and at once when the store says one changed (where
// it can say so).
type storeSwitchWatcher struct {
	switches *killSwitches
	store    twicestore.Store
	interval time.Duration
	logger   *slog.Logger
	// alsoRead, when set, is read with the switches: the limit overrides,
	// whose changes the store notifies on the switches' channel.
	alsoRead func(context.Context)
}

func newStoreSwitchWatcher(c *Client, s *killSwitches) *storeSwitchWatcher {
	return &storeSwitchWatcher{switches: s, store: c.store, interval: c.cfg.TogglePollInterval, logger: c.logger}
}

func (w *storeSwitchWatcher) run(ctx context.Context) {
	s := w.switches
	changed := make(chan struct{}, 1)
	var listening sync.WaitGroup
	defer listening.Wait()
	if l, ok := twicestore.As[twicestore.ToggleListener](w.store); ok {
		listening.Go(func() {
			err := l.ListenToggles(ctx, func() {
				select {
				case changed <- struct{}{}:
				default:
				}
			})
			if err != nil && ctx.Err() == nil {
				w.logger.Warn("listening for kill switch changes stopped; reading them every poll only",
					logattr.Component, "killswitch", logattr.Err, err)
			}
		})
	}
	// Start warned about the keys it loaded; warn again only when they change.
	s.mu.RLock()
	lastKeys := make([]string, len(s.toggles))
	for i, t := range s.toggles {
		lastKeys[i] = t.Kind
	}
	s.mu.RUnlock()
	for {
		res, err := w.store.ToggleList(ctx, &twicestore.ToggleListParams{})
		switch {
		case err != nil:
			if ctx.Err() == nil {
				w.logger.WarnContext(ctx, "reading kill switches failed; keeping the last ones read",
					logattr.Component, "killswitch", logattr.Err, err)
			}
		default:
			keys := make([]string, len(res.Toggles))
			for i, t := range res.Toggles {
				keys[i] = t.Kind
			}
			if !slices.Equal(keys, lastKeys) {
				s.warnUnknown(ctx, "store", keys)
				lastKeys = keys
			}
			s.mu.Lock()
			s.toggles = res.Toggles
			s.mu.Unlock()
			s.apply(ctx, false)
		}
		if w.alsoRead != nil {
			w.alsoRead(ctx)
		}
		t := time.NewTimer(periodic.Jitter(w.interval))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}

// fileSwitchWatcher reloads the kill switch file whenever it changes. A
// malformed edit keeps the last good state: a bad edit never flips
// anything.
type fileSwitchWatcher struct {
	switches *killSwitches
}

func newFileSwitchWatcher(s *killSwitches) *fileSwitchWatcher {
	return &fileSwitchWatcher{switches: s}
}

func (w *fileSwitchWatcher) run(ctx context.Context) {
	s := w.switches
	logger := s.logger.With(logattr.Component, "killswitch", "file", s.path)
	err := toggles.Watch(ctx, s.path, toggleFileDebounce, func(file map[string]bool) {
		s.warnUnknown(ctx, "file", slices.Collect(maps.Keys(file)))
		s.mu.Lock()
		s.file = file
		s.mu.Unlock()
		s.apply(ctx, false)
	}, func(err error) {
		logger.ErrorContext(ctx, "kill switch file rejected; keeping the last good state", logattr.Err, err)
	})
	if err != nil && ctx.Err() == nil {
		logger.ErrorContext(ctx, "watching the kill switch file stopped; its last state stays in force", logattr.Err, err)
	}
}

// waitingJobs counts the available jobs of kind (the ones a switch-off
// holds), or -1 when the count cannot be had.
func (s *killSwitches) waitingJobs(ctx context.Context, kind string) int {
	res, err := s.store.JobCount(ctx, &twicestore.JobCountParams{
		Filter: twicestore.JobFilter{State: twicetype.JobStateAvailable, Kind: kind}})
	if err != nil {
		return -1
	}
	n := 0
	for _, jc := range res.Counts {
		n += jc.Count
	}
	return n
}
