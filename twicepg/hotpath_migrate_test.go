package twicepg

import (
	"testing"

	"github.com/twicejobs/twice/twicestore/storetest"
)

func TestMigration021HotPathIndexes(t *testing.T) {
	t.Parallel()
	storetest.HotPathUpgrade(t, func(t *testing.T, version int) storetest.OldRows {
		return openOldSchema(t, version).(oldSchema)
	}, 20)
}
