package cli

import (
	"github.com/spf13/cobra"

	"github.com/twicejobs/twice"
)

// searchFlags select jobs by what they carry beside their kind and queue:
// the correlation id of the request that enqueued them, and metadata pairs.
type searchFlags struct {
	correlationID string
	meta          []string
}

func (s *searchFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&s.correlationID, "correlation-id", "", "only jobs enqueued with this correlation id")
	f.StringArrayVar(&s.meta, "meta", nil, "only jobs whose metadata has this key=value pair (repeat it: every pair must match)")
}

// apply checks the flags and sets them on f. The admin API checks the
// text itself (NUL bytes, sizes); only the key=value shape is read here.
func (s *searchFlags) apply(f *twice.JobFilter) error {
	f.CorrelationID = s.correlationID
	md, err := twice.ParseMetadataPairs(s.meta)
	if err != nil {
		return usagef("--meta: %v", err)
	}
	f.Metadata = md
	return nil
}

// narrows reports whether f selects fewer jobs than every job.
func narrows(f *twice.JobFilter) bool {
	return f.State != "" || f.Kind != "" || f.Queue != "" || f.Node != "" || f.Timing != "" ||
		f.CorrelationID != "" || len(f.Metadata) > 0
}
