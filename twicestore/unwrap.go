package twicestore

// Unwrapper is implemented by a store wrapper (a spy, a fault injector, a
// tracing layer) to name the store it wraps. A wrapper that embeds Store
// only has the methods of Store, so a type assertion for an optional
// capability (InsertListener, CancelListener, ToggleListener, ...)
// fails on it and the runtime would quietly lose LISTEN/NOTIFY or fetch
// peeks; with Unwrap, As finds the capability on the wrapped store, as
// http.ResponseController finds the optional methods of a wrapped
// http.ResponseWriter.
//
// A wrapper that overrides a method of a capability (ListenInserts, say)
// implements the capability itself; As finds its own method first.
type Unwrapper interface {
	// Unwrap returns the wrapped store.
	Unwrap() Store
}

// maxUnwrap bounds the walk, so a wrapper that (wrongly) unwraps to itself
// or to a cycle ends the search instead of the program.
const maxUnwrap = 100

// As finds capability T on s or, following Unwrap, on the stores s wraps,
// the outermost first. It reports false when none of them has it.
func As[T any](s Store) (T, bool) {
	for range maxUnwrap {
		if s == nil {
			break
		}
		if c, ok := s.(T); ok {
			return c, true
		}
		u, ok := s.(Unwrapper)
		if !ok {
			break
		}
		s = u.Unwrap()
	}
	var zero T
	return zero, false
}
