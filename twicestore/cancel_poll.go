package twicestore

// JobCancelRequestedParams names the leases a worker holds.
type JobCancelRequestedParams struct {
	Leases []JobLease
}

// JobCancelRequestedResult lists the jobs of the leases, still running
// under the given epoch, that an operator asked to cancel (JobCancel).
// Ascending.
type JobCancelRequestedResult struct {
	IDs []int64
}
