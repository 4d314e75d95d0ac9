package twicemysql

import (
	"errors"

	"github.com/go-sql-driver/mysql"

	"github.com/twicejobs/twice/twicestore"
)

// Server error numbers twice tells apart, from MySQL's and MariaDB's
// error references.
const (
	erDupKey            = 1022 // can't write; duplicate key in table
	erDupEntry          = 1062 // duplicate entry for key
	erDupUnique         = 1169 // can't write, because of unique constraint
	erDupEntryWithKey   = 1586 // duplicate entry for key (with the key's name)
	erLockWaitTimeout   = 1205 // lock wait timeout exceeded
	erLockDeadlock      = 1213 // deadlock found when trying to get lock
	erTruncatedWrongVal = 1292 // incorrect datetime (or other) value
	erDataTooLong       = 1406 // data too long for column
	erWarnDataOutOfRng  = 1264 // out of range value for column
	erTruncatedField    = 1366 // incorrect string value (bytes that are not the charset's)
	erNetPacketTooLarge = 1153 // got a packet bigger than max_allowed_packet
	erLockNowait        = 3572 // NOWAIT: the row is locked (MySQL 8)
	erNoSuchTable       = 1146 // table doesn't exist
)

// isNoSuchTable reports whether err is the server's "table doesn't exist".
func isNoSuchTable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == erNoSuchTable
}

// isUniqueViolation reports whether err is a unique index refusing a row,
// by every number MySQL and MariaDB use for it (the lesson of SQL
// Server's 2627 and 2601: one code is not enough).
func isUniqueViolation(err error) bool {
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return false
	}
	switch me.Number {
	case erDupKey, erDupEntry, erDupUnique, erDupEntryWithKey:
		return true
	}
	return false
}

// isDeadlock reports whether InnoDB rolled the transaction back to break
// a deadlock: the whole transaction may be run again.
func isDeadlock(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == erLockDeadlock
}

// mapError maps the server's errors to twicestore's sentinels: a value the
// column refuses (too long, bytes not UTF-8, a packet over
// max_allowed_packet) is twicestore.ErrUnstorable, since the same write
// fails the same way on every try; a lock wait that timed out is
// twicestore.ErrLockTimeout. Other errors are returned as they are.
func mapError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, mysql.ErrPktTooLarge) {
		return twicestore.Unstorable(err)
	}
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return err
	}
	switch me.Number {
	case erDataTooLong, erTruncatedField, erWarnDataOutOfRng, erTruncatedWrongVal, erNetPacketTooLarge:
		return twicestore.Unstorable(err)
	case erLockWaitTimeout, erLockNowait:
		return errors.Join(twicestore.ErrLockTimeout, err)
	}
	return err
}
