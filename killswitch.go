package twice

import (
	"context"
	"fmt"
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

// TogglePollIntervalDefault is how often a worker reads the store's kill
// switches, so a flip from the CLI reaches every node within about this.
const TogglePollIntervalDefault = time.Second

// toggleFileDebounce is how long the file watcher waits for an editor to
// finish writing before it reloads.
const toggleFileDebounce = 100 * time.Millisecond

// killSwitches is the worker's view of the kill switches: the file's and
// the store's toggles and, from them, which registered kinds may run.
type killSwitches struct {
	mu      sync.RWMutex
	file    map[string]bool
	store   []twicetype.Toggle
	enabled map[string]bool // registered kind -> may run
}

// loadKillSwitches reads both sources once, before the worker fetches
// anything, so it never runs a kind that is switched off. A file that
// cannot be read or parsed fails the start: with no last good state to
// keep, guessing would not be fail-closed.
func (c *Client) loadKillSwitches(ctx context.Context) error {
	c.switches = &killSwitches{file: map[string]bool{}, enabled: map[string]bool{}}
	if c.cfg.TogglesFile != "" {
		file, err := toggles.LoadFile(c.cfg.TogglesFile)
		if err != nil {
			return fmt.Errorf("kill switch file: %w", err)
		}
		c.switches.file = file
	}
	res, err := c.store.ToggleList(ctx, &twicestore.ToggleListParams{})
	if err != nil {
		return fmt.Errorf("read kill switches: %w", err)
	}
	c.switches.store = res.Toggles
	c.applySwitches(ctx, true)
	return nil
}

// applySwitches recomputes which kinds may run, logs each kind whose
// switch moved and every key that names no registered kind, and wakes the
// fetch loop so held jobs of a kind switched on start at once.
func (c *Client) applySwitches(ctx context.Context, first bool) {
	s := c.switches
	s.mu.Lock()
	set := toggles.NewSet(s.file, s.store)
	kinds := c.registry.Kinds()
	next := make(map[string]bool, len(kinds))
	var moved []toggles.Decision
	for _, k := range kinds {
		d := set.Decide(k, c.registry.lookup(k).opts.FailClosed)
		next[k] = d.Enabled
		if old, ok := s.enabled[k]; (first && !d.Enabled) || (ok && old != d.Enabled) {
			moved = append(moved, d)
		}
	}
	changed := !maps.Equal(next, s.enabled)
	s.enabled = next
	s.mu.Unlock()

	logger := c.logger.With(logattr.Component, "killswitch")
	for _, d := range moved {
		if d.Enabled {
			logger.InfoContext(ctx, "kind switched on: its held jobs run again", logattr.Kind, d.Kind, "decision", d.String())
		} else {
			logger.WarnContext(ctx, "kind switched off: its jobs are held, queued and untouched, until it is on again",
				logattr.Kind, d.Kind, "decision", d.String(), "held", c.waitingJobs(ctx, d.Kind))
		}
	}
	if changed && !first && c.producer != nil {
		c.producer.Notify()
	}
}

// warnUnknownToggleKeys logs, loudly, keys of source that name no
// registered kind: they switch nothing, while the operator thinks they do.
func (c *Client) warnUnknownToggleKeys(ctx context.Context, source string, keys []string) {
	for _, u := range toggles.Unknown(keys, c.registry.Kinds()) {
		c.logger.WarnContext(ctx, u.String(), logattr.Component, "killswitch", "source", source)
	}
}

// switchKeys lists every toggle key of both sources.
func (c *Client) switchKeys() []string {
	s := c.switches
	s.mu.RLock()
	defer s.mu.RUnlock()
	return toggles.NewSet(s.file, s.store).Keys()
}

// enabledKinds lists the registered kinds whose switch is on: what the
// fetch loop asks for.
func (c *Client) enabledKinds() []string {
	s := c.switches
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
func (c *Client) kindEnabled(kind string) bool {
	s := c.switches
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.enabled[kind]
}

// storeSwitchLoop reads the store's kill switches every TogglePollInterval,
// and at once when the store says one changed (where it can say so).
func (c *Client) storeSwitchLoop(ctx context.Context) {
	changed := make(chan struct{}, 1)
	if l, ok := twicestore.As[twicestore.ToggleListener](c.store); ok {
		c.goLoop(func() {
			err := l.ListenToggles(ctx, func() {
				select {
				case changed <- struct{}{}:
				default:
				}
			})
			if err != nil && ctx.Err() == nil {
				c.logger.Warn("listening for kill switch changes stopped; reading them every poll only",
					logattr.Component, "killswitch", logattr.Err, err)
			}
		})
	}
	// Start warned about the keys it loaded; warn again only when they change.
	c.switches.mu.RLock()
	lastKeys := make([]string, len(c.switches.store))
	for i, t := range c.switches.store {
		lastKeys[i] = t.Kind
	}
	c.switches.mu.RUnlock()
	for {
		res, err := c.store.ToggleList(ctx, &twicestore.ToggleListParams{})
		switch {
		case err != nil:
			if ctx.Err() == nil {
				c.logger.WarnContext(ctx, "reading kill switches failed; keeping the last ones read",
					logattr.Component, "killswitch", logattr.Err, err)
			}
		default:
			keys := make([]string, len(res.Toggles))
			for i, t := range res.Toggles {
				keys[i] = t.Kind
			}
			if !slices.Equal(keys, lastKeys) {
				c.warnUnknownToggleKeys(ctx, "store", keys)
				lastKeys = keys
			}
			c.switches.mu.Lock()
			c.switches.store = res.Toggles
			c.switches.mu.Unlock()
			c.applySwitches(ctx, false)
		}
		t := time.NewTimer(periodic.Jitter(c.cfg.TogglePollInterval))
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

// fileSwitchLoop reloads the kill switch file whenever it changes. A
// malformed edit keeps the last good state: a bad edit never flips
// anything.
func (c *Client) fileSwitchLoop(ctx context.Context) {
	logger := c.logger.With(logattr.Component, "killswitch", "file", c.cfg.TogglesFile)
	err := toggles.Watch(ctx, c.cfg.TogglesFile, toggleFileDebounce, func(file map[string]bool) {
		c.warnUnknownToggleKeys(ctx, "file", slices.Collect(maps.Keys(file)))
		c.switches.mu.Lock()
		c.switches.file = file
		c.switches.mu.Unlock()
		c.applySwitches(ctx, false)
	}, func(err error) {
		logger.ErrorContext(ctx, "kill switch file rejected; keeping the last good state", logattr.Err, err)
	})
	if err != nil && ctx.Err() == nil {
		logger.ErrorContext(ctx, "watching the kill switch file stopped; its last state stays in force", logattr.Err, err)
	}
}

// waitingJobs counts the available jobs of kind (the ones a switch-off
// holds), or -1 when the count cannot be had.
func (c *Client) waitingJobs(ctx context.Context, kind string) int {
	res, err := c.store.JobCount(ctx, &twicestore.JobCountParams{
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
