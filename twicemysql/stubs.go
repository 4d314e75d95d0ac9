package twicemysql

import "errors"

// errNotImplemented marks the methods not ported yet (the branch's
// scaffolding; it never lands in main).
var errNotImplemented = errors.New("twicemysql: not implemented yet")
