package twicestore_test

import (
	"context"
	"testing"

	"github.com/twicejobs/twice/twicestore"
)

// capable stands for a driver's store with one optional capability.
type capable struct{ twicestore.Store }

func (capable) ListenInserts(context.Context, func(string)) error { return nil }

// wrapper embeds Store, so it has only Store's methods, and names what it
// wraps.
type wrapper struct{ twicestore.Store }

func (w wrapper) Unwrap() twicestore.Store { return w.Store }

// selfish unwraps to itself, a wrapper bug As must survive.
type selfish struct{ twicestore.Store }

func (s *selfish) Unwrap() twicestore.Store { return s }

func TestAs(t *testing.T) {
	if _, ok := twicestore.As[twicestore.InsertListener](capable{}); !ok {
		t.Error("not found on the store itself")
	}
	if _, ok := twicestore.As[twicestore.InsertListener](wrapper{wrapper{capable{}}}); !ok {
		t.Error("not found through two wrappers")
	}
	if _, ok := twicestore.As[twicestore.InsertListener](wrapper{}); ok {
		t.Error("found on a wrapper of nothing")
	}
	if _, ok := twicestore.As[twicestore.ToggleListener](wrapper{capable{}}); ok {
		t.Error("found a capability no store in the chain has")
	}
	if _, ok := twicestore.As[twicestore.InsertListener](&selfish{}); ok {
		t.Error("found a capability on a wrapper that unwraps to itself")
	}
}
