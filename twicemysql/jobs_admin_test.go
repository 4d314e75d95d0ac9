package twicemysql

import (
	"testing"

	"github.com/twicejobs/twice/twicestore"
)

// TestMetadataFilterEscapedCharacters: a metadata pair is found whatever
// characters its key and value hold, those encoding/json escapes (<, >, &,
// U+2028, control characters) and those a JSON path means something by
// (. [ * $ quotes and backslashes) alike. MariaDB's JSON_CONTAINS compared
// the escaped text and missed the first kind.
func TestMetadataFilterEscapedCharacters(t *testing.T) {
	s := openTemp(t)
	md := map[string]string{
		"a<b": "x&y>z", "line": "v\u2028w", "ctl": "a\tb", "a.b": "1", "x[0]": "2", "*": "3",
		"é\u2028": "é", `"\`: `\"`, "$": "6", " sp ace": "7",
	}
	_, err := s.JobInsertMany(t.Context(), &twicestore.JobInsertManyParams{Jobs: []*twicestore.JobInsertParams{{
		Kind: "mysql.metadata.v1", Queue: "default", Args: []byte(`{}`), MaxAttempts: 1, Metadata: md}}})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range md {
		res, err := s.JobList(t.Context(), &twicestore.JobListParams{Filter: twicestore.JobFilter{Metadata: map[string]string{k: v}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Jobs) != 1 {
			t.Errorf("metadata %q = %q: listed %d jobs, want 1", k, v, len(res.Jobs))
		}
		res, err = s.JobList(t.Context(), &twicestore.JobListParams{Filter: twicestore.JobFilter{Metadata: map[string]string{k: v + "x"}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Jobs) != 0 {
			t.Errorf("metadata %q = %q: listed %d jobs, want none", k, v+"x", len(res.Jobs))
		}
	}
}
