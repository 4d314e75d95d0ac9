package twiceweb

import (
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicestore"
)

// parseSearch reads the jobs page's search fields into f: correlation_id,
// and meta, repeated, each key=value (every pair must match); a blank
// meta field (the form's empty one) is skipped. The admin API checks the
// text itself.
func parseSearch(q url.Values, f *twicestore.JobFilter) error {
	f.CorrelationID = strings.TrimSpace(q.Get("correlation_id"))
	pairs := make([]string, len(q["meta"]))
	for i, kv := range q["meta"] {
		pairs[i] = strings.TrimSpace(kv)
	}
	md, err := twice.ParseMetadataPairs(pairs)
	if err != nil {
		return badInputf("meta: %v", err)
	}
	f.Metadata = md
	return nil
}

// searchQuery renders f's search fields into q, the pairs by key.
func searchQuery(f twicestore.JobFilter, q url.Values) {
	if f.CorrelationID != "" {
		q.Set("correlation_id", f.CorrelationID)
	}
	for _, k := range slices.Sorted(maps.Keys(f.Metadata)) {
		q.Add("meta", k+"="+f.Metadata[k])
	}
}

// MetaPairs lists the filter's metadata pairs as key=value, by key, for
// the filter form's fields.
func (d jobsData) MetaPairs() []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(d.Filter.Metadata)) {
		out = append(out, k+"="+d.Filter.Metadata[k])
	}
	return out
}
