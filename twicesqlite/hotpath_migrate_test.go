package twicesqlite

import (
	"testing"

	"github.com/twicejobs/twice/twicestore/storetest"
)

// TestUpgradeKeepsEveryState runs the check of PostgreSQL's migration 021
// on SQLite, whose schema that change left alone, from its version 17.
func TestUpgradeKeepsEveryState(t *testing.T) {
	t.Parallel()
	storetest.HotPathUpgrade(t, func(t *testing.T, version int) storetest.OldRows {
		return openOldSchema(t, version).(oldSchema)
	}, 17)
}
