package driverkit

import "testing"

func TestUniqueHeldSQL(t *testing.T) {
	t.Parallel()
	want := "j.unique_key <> '' AND (j.unique_states & CASE j.state WHEN 'available' THEN 1 WHEN 'running' THEN 2 WHEN 'waiting' THEN 2 " +
		"WHEN 'completed' THEN 4 WHEN 'dead' THEN 8 WHEN 'discarded' THEN 16 WHEN 'cancelled' THEN 32 ELSE 0 END) <> 0"
	if got := UniqueHeldSQL("j"); got != want {
		t.Errorf("UniqueHeldSQL(j) =\n%s\nwant (the unique index's predicate since the waiting state)\n%s", got, want)
	}
	if got := UniqueHeldSQL(""); got[:len("unique_key")] != "unique_key" {
		t.Errorf("UniqueHeldSQL(\"\") = %s, want it unqualified", got)
	}
}
