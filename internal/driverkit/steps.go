package driverkit

import (
	"database/sql"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/twicetype"
)

// StepColumns are the columns of twice_steps that StepRow reads, in its
// order.
const StepColumns = "step, strategy, claimed_at, done_at, receipt, job_id, epoch"

// StepRow returns the reader of one row of StepColumns into a step of
// handler and key; its times read as tm says, a NULL receipt as nil.
func StepRow[T, N any](tm Times[T, N], handler, key string) func(dbrows.Scanner) (*twicetype.Step, error) {
	return func(r dbrows.Scanner) (*twicetype.Step, error) {
		var (
			s             = &twicetype.Step{Handler: handler, Key: key}
			claimed, done N
			receipt       sql.NullString
		)
		if err := r.Scan(&s.Step, &s.Strategy, &claimed, &done, &receipt, &s.JobID, &s.Epoch); err != nil {
			return nil, err
		}
		s.ClaimedAt, s.DoneAt = tm.Null(claimed), tm.Null(done)
		if receipt.Valid {
			s.Receipt = []byte(receipt.String)
		}
		return s, nil
	}
}
