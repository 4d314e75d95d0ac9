// Package freetext is the one place where free text meets the database.
// Text a caller gives (a reason, a name, a filter, who did it) is checked
// at the door and refused with a clear error when it holds a NUL byte,
// bytes that are not UTF-8, or more than its cap. Text the system itself
// must store whatever it holds (a handler's error, a no-op or cancel
// reason, a panic value) is cleaned instead: made storable by every
// driver and marked where it was changed, so an outcome is never lost to
// bytes PostgreSQL refuses.
package freetext
