package twicemysql

import (
	"fmt"

	"github.com/twicejobs/twice/twicestore"
)

// Temporary copy of my-core's appendError, dropped at the merge.
var appendErrorSQL = fmt.Sprintf(`CASE WHEN JSON_LENGTH(errors) + 1 > %[1]d
	THEN JSON_REMOVE(JSON_MERGE_PRESERVE(errors, %%s), '$[%[2]d]')
	ELSE JSON_MERGE_PRESERVE(errors, %%s) END`, twicestore.ErrorsKeptFirst+twicestore.ErrorsKeptLast, twicestore.ErrorsKeptFirst)

func appendError(expr string) string { return fmt.Sprintf(appendErrorSQL, expr, expr) }
