package twiceweb

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/ops"
	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// pageSize is how many jobs a listing shows at once.
const pageSize = 50

// overviewData is the overview page.
type overviewData struct {
	States     []stateCount
	Queues     []queueRow
	Total      int
	Chart      chart
	Completed  int // in the last hour
	Dead       int // in the last hour
	FailRate   string
	Nodes      []*twicetype.Node
	Orphans    int
	OrphanJobs int
	Stranded   int // queues
}

func (overviewData) page() string { return "overview" }

// stranded reports a queue whose jobs wait with no live node to work it.
func stranded(q twice.QueueInfo) bool { return len(q.Nodes) == 0 && q.Due+q.Scheduled > 0 }

type stateCount struct {
	State twicetype.JobState
	Count int
}

// queueRow is one queue's counts by state, with its depth and age.
type queueRow struct {
	Queue     string
	ByState   []int // in twicetype.AllJobStates order
	Due       int
	Scheduled int
	OldestDue time.Time
	Paused    bool
	Until     time.Time // when Paused: zero until resumed
	Stranded  bool      // jobs wait and no live node works the queue
}

func (h *Handler) overview(r *http.Request) (string, any, error) {
	ctx := r.Context()
	counts, err := h.store.JobCount(ctx, &twicestore.JobCountParams{})
	if err != nil {
		return "", nil, err
	}
	d := overviewData{}
	byState := map[twicetype.JobState]int{}
	queues := map[string]*queueRow{}
	queueOf := func(q string) *queueRow {
		if queues[q] == nil {
			queues[q] = &queueRow{Queue: q, ByState: make([]int, len(twicetype.AllJobStates))}
		}
		return queues[q]
	}
	for _, c := range counts.Counts {
		byState[c.State] += c.Count
		d.Total += c.Count
		queueOf(c.Queue).ByState[slices.Index(twicetype.AllJobStates, c.State)] += c.Count
	}
	for _, s := range twicetype.AllJobStates {
		d.States = append(d.States, stateCount{State: s, Count: byState[s]})
	}
	now := time.Now()
	qs, err := h.store.JobQueueStats(ctx, &twicestore.JobQueueStatsParams{Now: now})
	if err != nil {
		return "", nil, err
	}
	for _, q := range qs.Queues {
		row := queueOf(q.Queue)
		row.Due, row.Scheduled, row.OldestDue = q.Due, q.Scheduled, q.OldestDue
	}
	infos, err := h.client.QueueList(ctx)
	if err != nil {
		return "", nil, err
	}
	for _, q := range infos {
		if row := queues[q.Name]; row != nil {
			row.Paused, row.Until = q.Paused, q.Until
			row.Stranded = stranded(q)
			if row.Stranded {
				d.Stranded++
			}
		}
	}
	for _, q := range queues {
		d.Queues = append(d.Queues, *q)
	}
	slices.SortFunc(d.Queues, func(a, b queueRow) int { return strings.Compare(a.Queue, b.Queue) })

	since := now.Truncate(time.Minute).Add(-59 * time.Minute)
	tp, err := h.store.JobThroughput(ctx, &twicestore.JobThroughputParams{Since: since, Until: now.Add(time.Second), Bucket: time.Minute})
	if err != nil {
		return "", nil, err
	}
	d.Chart = throughputChart(since, 60, tp.Buckets)
	for _, b := range tp.Buckets {
		d.Completed += b.Completed
		d.Dead += b.Dead
	}
	d.FailRate = "-"
	if n := d.Completed + d.Dead; n > 0 {
		d.FailRate = strconv.FormatFloat(100*float64(d.Dead)/float64(n), 'f', 1, 64) + "%"
	}
	d.Nodes, err = h.store.NodeList(ctx, &twicestore.NodeListParams{AliveSince: now.Add(-ops.NodeAliveWindow)})
	if err != nil {
		return "", nil, err
	}
	orphans, err := h.store.JobOrphans(ctx, &twicestore.JobOrphansParams{AliveSince: now.Add(-ops.NodeAliveWindow)})
	if err != nil {
		return "", nil, err
	}
	d.Orphans = len(orphans.Kinds)
	for _, o := range orphans.Kinds {
		d.OrphanJobs += o.Count
	}
	return "Overview", d, nil
}

// jobsData is a page of a job listing: the jobs page and the dead letters.
type jobsData struct {
	Base    string // the dashboard's prefix, for links in shared rows
	Dead    bool   // the dead-letter page: no state filter, actions
	Filter  twicestore.JobFilter
	Kinds   []string
	Queues  []string
	Nodes   []string // the live nodes, and the filter's
	States  []twicetype.JobState
	Jobs    []*twicetype.JobRow
	Before  int64 // the page continues below this id; 0 is the newest
	Next    int64 // the id to continue from; 0 when this is the last page
	Matches int   // dead letters: how many match the filter
	// Paused lists the paused queues: their jobs wait on purpose.
	Paused []string
	Now    time.Time // available jobs due after it are scheduled
	// Select puts a checkbox on every row and the bulk actions above
	// them (see bulk.go).
	Select bool
	// Why says why each listed job that waits does, by id.
	Why map[int64]*twice.WaitReason
}

// IsPaused reports whether queue is paused, for a listing's rows.
func (d jobsData) IsPaused(queue string) bool { return slices.Contains(d.Paused, queue) }

func (d jobsData) page() string {
	if d.Dead {
		return "dead"
	}
	return "jobs"
}

// Query renders the filter (and a page start) as a query string.
func (d jobsData) Query(before int64) string {
	q := filterQuery(d.Filter)
	if before > 0 {
		q.Set("before", strconv.FormatInt(before, 10))
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

func (h *Handler) jobs(r *http.Request) (string, any, error) {
	d, err := h.listJobs(r, false)
	d.Select = !h.opts.ReadOnly
	return "Jobs", d, err
}

func (h *Handler) dead(r *http.Request) (string, any, error) {
	d, err := h.listJobs(r, true)
	return "Dead letters", d, err
}

func (h *Handler) listJobs(r *http.Request, dead bool) (jobsData, error) {
	q := r.URL.Query()
	f, err := parseFilter(q, !dead)
	if err != nil {
		return jobsData{}, err
	}
	if dead {
		f.State = twicetype.JobStateDead
	}
	d := jobsData{Base: info(r).base, Dead: dead, Filter: f, States: twicetype.AllJobStates, Now: time.Now()}
	if s := q.Get("before"); s != "" {
		if d.Before, err = strconv.ParseInt(s, 10, 64); err != nil || d.Before <= 0 {
			return d, badInputf("before=%q is not a job id: give a positive integer", s)
		}
	}
	res, err := h.client.JobList(r.Context(), &twice.JobListParams{
		JobFilter: twice.JobFilter{State: f.State, Kind: f.Kind, Queue: f.Queue, Timing: f.Timing, Node: f.Node,
			CorrelationID: f.CorrelationID, Metadata: f.Metadata},
		BeforeID: d.Before, Limit: pageSize,
	})
	if err != nil {
		return d, err
	}
	d.Jobs, d.Next = res.Jobs, res.Next
	if d.Why, err = h.waitReasons(r.Context(), res.Jobs); err != nil {
		return d, err
	}
	// The filter's choices come from what is cheap to know — the
	// catalogued kinds, the known queues — never from a scan of every job.
	add := func(list *[]string, v string) {
		if v != "" && !slices.Contains(*list, v) {
			*list = append(*list, v)
		}
	}
	kc, err := h.catalog(r.Context())
	if err != nil {
		return d, err
	}
	for _, k := range kc.kinds {
		add(&d.Kinds, k)
	}
	queues, err := h.client.QueueList(r.Context())
	if err != nil {
		return d, err
	}
	for _, q := range queues {
		add(&d.Queues, q.Name)
		if q.Paused {
			d.Paused = append(d.Paused, q.Name)
		}
	}
	nodes, err := h.store.NodeList(r.Context(), &twicestore.NodeListParams{AliveSince: time.Now().Add(-ops.NodeAliveWindow)})
	if err != nil {
		return d, err
	}
	for _, n := range nodes {
		add(&d.Nodes, n.ID)
	}
	add(&d.Kinds, f.Kind)
	add(&d.Queues, f.Queue)
	add(&d.Nodes, f.Node)
	if dead { // dead jobs are few and indexed by state: count them, and offer their kinds
		counts, err := h.store.JobCount(r.Context(), &twicestore.JobCountParams{Filter: twicestore.JobFilter{State: twicetype.JobStateDead}})
		if err != nil {
			return d, err
		}
		for _, c := range counts.Counts {
			add(&d.Kinds, c.Kind)
			add(&d.Queues, c.Queue)
			if (f.Kind == "" || f.Kind == c.Kind) && (f.Queue == "" || f.Queue == c.Queue) {
				d.Matches += c.Count
			}
		}
	}
	slices.Sort(d.Kinds)
	slices.Sort(d.Queues)
	return d, nil
}

// jobData is the job detail page.
type jobData struct {
	Job *twicetype.JobRow
	// Args are the args as indented JSON, sensitive fields redacted;
	// empty when they are hidden.
	Args         string
	Redacted     []string
	ArgsHidden   bool // the kind is in no catalog: no field can be recognised as sensitive
	LatestErrors []twicetype.AttemptError
	// Now tells a scheduled job (run time after it), which can run now.
	Now time.Time
	// Detail is what the job produced and belongs to.
	Detail *twice.JobDetail
	// Why says why the job waits; nil when it runs or has finished.
	Why *twice.WaitReason
}

func (jobData) page() string { return "job" }

func (h *Handler) job(r *http.Request) (string, any, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return "", nil, badInputf("%q is not a job id: give a positive integer", r.PathValue("id"))
	}
	detail, err := h.client.JobDetail(r.Context(), id)
	if err != nil {
		return "", nil, err
	}
	j := detail.Job
	d := jobData{Job: j, Now: time.Now(), Detail: detail}
	why, err := h.waitReasons(r.Context(), []*twicetype.JobRow{j})
	if err != nil {
		return "", nil, err
	}
	d.Why = why[j.ID]
	kc, err := h.catalog(r.Context())
	if err != nil {
		return "", nil, err
	}
	fields, catalogued := kc.sensitive(j.Kind)
	if !catalogued {
		d.ArgsHidden = true
	} else {
		args, redacted := ops.Redact(j.Args, fields)
		var pretty []byte
		if len(args) > 0 {
			var v any
			if json.Unmarshal(args, &v) == nil {
				pretty, _ = json.MarshalIndent(v, "", "  ")
			}
		}
		if pretty == nil {
			pretty = args
		}
		d.Args, d.Redacted = string(pretty), redacted
	}
	d.LatestErrors = slices.Clone(j.Errors)
	slices.Reverse(d.LatestErrors)
	return "Job " + strconv.FormatInt(id, 10), d, nil
}

// recurringData is the recurring schedules page.
type recurringData struct{ Schedules []scheduleRow }

// scheduleRow is a schedule with its recent ticks, newest first.
type scheduleRow struct {
	twice.ScheduleInfo
	Ticks   []twicetype.ScheduleTick
	Skipped int // among Ticks
	// Removable: the store records it and no code here or in the catalog
	// defines it any more, so removing it does not bring it back.
	Removable bool
}

func (recurringData) page() string { return "recurring" }

// recentTicks is how many ticks the page shows per schedule.
const recentTicks = 10

func (h *Handler) recurring(r *http.Request) (string, any, error) {
	list, err := h.client.ScheduleList(r.Context())
	if err != nil {
		return "", nil, err
	}
	d := recurringData{}
	for _, sc := range list {
		row := scheduleRow{ScheduleInfo: sc, Removable: sc.Recorded && !sc.Registered}
		if sc.Recorded {
			ticks, err := h.store.ScheduleTicks(r.Context(), &twicestore.ScheduleTicksParams{Name: sc.Name, Limit: recentTicks})
			if err != nil {
				return "", nil, err
			}
			row.Ticks = ticks.Ticks
		}
		for _, t := range row.Ticks {
			if t.Outcome == twicetype.ScheduleSkipped {
				row.Skipped++
			}
		}
		d.Schedules = append(d.Schedules, row)
	}
	return "Recurring", d, nil
}

// switchesData is the kill switches page.
type switchesData struct {
	Known   []switchRow
	Unknown []switchRow
	File    string
	// Waiting counts each kind's available jobs: held while it is off.
	Waiting map[string]int
}

func (switchesData) page() string { return "switches" }

func (h *Handler) switches(r *http.Request) (string, any, error) {
	rows, _, err := h.toggleRows(r)
	if err != nil {
		return "", nil, err
	}
	d := switchesData{File: h.opts.TogglesFile, Waiting: map[string]int{}}
	counts, err := h.store.JobCount(r.Context(), &twicestore.JobCountParams{Filter: twicestore.JobFilter{State: twicetype.JobStateAvailable}})
	if err != nil {
		return "", nil, err
	}
	for _, c := range counts.Counts {
		d.Waiting[strings.ToLower(c.Kind)] += c.Count
	}
	for _, row := range rows {
		if row.Known {
			d.Known = append(d.Known, row)
		} else {
			d.Unknown = append(d.Unknown, row)
		}
	}
	return "Kill switches", d, nil
}

// historyData is a page of the switch history.
type historyData struct {
	Kind    string // empty: every kind
	Changes []twicetype.ToggleChange
	Before  int64
	Next    int64
}

func (historyData) page() string { return "history" }

// Query renders the kind (and a page start) as a query string.
func (d historyData) Query(before int64) string {
	q := url.Values{}
	if d.Kind != "" {
		q.Set("kind", d.Kind)
	}
	if before > 0 {
		q.Set("before", strconv.FormatInt(before, 10))
	}
	return queryOf(q)
}

func (h *Handler) history(r *http.Request) (string, any, error) {
	q := r.URL.Query()
	d := historyData{Kind: strings.TrimSpace(q.Get("kind"))}
	if s := q.Get("before"); s != "" {
		var err error
		if d.Before, err = strconv.ParseInt(s, 10, 64); err != nil || d.Before <= 0 {
			return "", nil, badInputf("before=%q is not a history entry: give a positive integer", s)
		}
	}
	res, err := h.client.ToggleHistory(r.Context(), &twice.ToggleHistoryParams{Kind: d.Kind, BeforeID: d.Before, Limit: pageSize})
	if errors.Is(err, twice.ErrInvalidInput) {
		return "", nil, badInputf("%v", err)
	}
	if err != nil {
		return "", nil, err
	}
	d.Changes, d.Next = res.Changes, res.Next
	title := "Switch history"
	if d.Kind != "" {
		title += " of " + d.Kind
	}
	return title, d, nil
}

// queuesData is the queues page.
type queuesData struct {
	Queues []queueInfoRow
}

// queueInfoRow is one queue as the queues page shows it.
type queueInfoRow struct {
	twice.QueueInfo
	Stranded bool
}

func (queuesData) page() string { return "queues" }

func (h *Handler) queues(r *http.Request) (string, any, error) {
	list, err := h.client.QueueList(r.Context())
	if err != nil {
		return "", nil, err
	}
	d := queuesData{}
	for _, q := range list {
		d.Queues = append(d.Queues, queueInfoRow{QueueInfo: q, Stranded: stranded(q)})
	}
	return "Queues", d, nil
}

// orphansData is the orphaned kinds and stranded queues page.
type orphansData struct {
	Kinds    []twicetype.OrphanKind
	Stranded []twicetype.StrandedQueue
}

func (orphansData) page() string { return "orphans" }

func (h *Handler) orphans(r *http.Request) (string, any, error) {
	kinds, err := h.client.Orphans(r.Context())
	if err != nil {
		return "", nil, err
	}
	stranded, err := h.client.StrandedQueues(r.Context())
	if err != nil {
		return "", nil, err
	}
	return "Orphaned kinds and stranded queues", orphansData{Kinds: kinds, Stranded: stranded}, nil
}

// markersData is the marker lookup page.
type markersData struct {
	Handler, Key string
	Asked        bool
	Processed    bool
	// Marker is the claim found, when Processed.
	Marker *twicetype.Marker
}

func (markersData) page() string { return "markers" }

func (h *Handler) markers(r *http.Request) (string, any, error) {
	q := r.URL.Query()
	d := markersData{Handler: strings.TrimSpace(q.Get("handler")), Key: q.Get("key")}
	if d.Handler == "" && d.Key == "" {
		return "Markers", d, nil
	}
	if d.Handler == "" || d.Key == "" {
		return "", nil, badInputf("a marker lookup needs both a handler (the kind, unless registered with a HandlerName) and a key")
	}
	m, err := h.client.MarkerGet(r.Context(), &twice.MarkerParams{Handler: d.Handler, Key: d.Key})
	switch {
	case errors.Is(err, twice.ErrMarkerNotFound):
		d.Asked = true
	case err != nil:
		return "", nil, err
	default:
		d.Asked, d.Processed, d.Marker = true, true, m
	}
	return "Markers", d, nil
}
