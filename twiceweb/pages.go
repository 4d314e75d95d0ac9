package twiceweb

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/internal/ops"
	"github.com/twicejobs/twice/internal/toggles"
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
}

func (overviewData) page() string { return "overview" }

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
	States  []twicetype.JobState
	Jobs    []*twicetype.JobRow
	Before  int64 // the page continues below this id; 0 is the newest
	Next    int64 // the id to continue from; 0 when this is the last page
	Matches int   // dead letters: how many match the filter
}

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
	return "Jobs", d, err
}

func (h *Handler) dead(r *http.Request) (string, any, error) {
	d, err := h.listJobs(r, true)
	return "Dead letters", d, err
}

func (h *Handler) listJobs(r *http.Request, dead bool) (jobsData, error) {
	f, err := parseFilter(r.URL.Query(), !dead)
	if err != nil {
		return jobsData{}, err
	}
	if dead {
		f.State = twicetype.JobStateDead
	}
	d := jobsData{Base: info(r).base, Dead: dead, Filter: f, States: twicetype.AllJobStates}
	if s := r.URL.Query().Get("before"); s != "" {
		if d.Before, err = strconv.ParseInt(s, 10, 64); err != nil || d.Before <= 0 {
			return d, badInputf("before=%q is not a job id: give a positive integer", s)
		}
	}
	// One more than a page tells whether there is a next one.
	res, err := h.store.JobList(r.Context(), &twicestore.JobListParams{Filter: f, BeforeID: d.Before, Limit: pageSize + 1})
	if err != nil {
		return d, err
	}
	d.Jobs = res.Jobs
	if len(d.Jobs) > pageSize {
		d.Jobs = d.Jobs[:pageSize]
		d.Next = d.Jobs[pageSize-1].ID
	}
	// The filter's choices come from what is cheap to know — the kinds
	// registered here and handled by live workers, their queues, the
	// standard queues — never from a scan of every job.
	add := func(list *[]string, v string) {
		if v != "" && !slices.Contains(*list, v) {
			*list = append(*list, v)
		}
	}
	var reg ops.Kinds
	if h.opts.Registry != nil {
		reg = h.opts.Registry
	}
	nodes, err := h.store.NodeList(r.Context(), &twicestore.NodeListParams{AliveSince: time.Now().Add(-ops.NodeAliveWindow)})
	if err != nil {
		return d, err
	}
	for _, k := range ops.NewCatalog(reg, nodes).Kinds {
		add(&d.Kinds, k)
	}
	for _, q := range []string{twice.QueueCritical, twice.QueueDefault, twice.QueueBulk} {
		add(&d.Queues, q)
	}
	for _, n := range nodes {
		for _, q := range n.Queues {
			add(&d.Queues, q)
		}
	}
	add(&d.Kinds, f.Kind)
	add(&d.Queues, f.Queue)
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
	ArgsHidden   bool // the kind is not registered: no field can be recognised as sensitive
	LatestErrors []twicetype.AttemptError
}

func (jobData) page() string { return "job" }

func (h *Handler) job(r *http.Request) (string, any, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return "", nil, badInputf("%q is not a job id: give a positive integer", r.PathValue("id"))
	}
	j, err := h.store.JobGet(r.Context(), &twicestore.JobGetParams{ID: id})
	if err != nil {
		return "", nil, err
	}
	d := jobData{Job: j}
	fields, registered := h.opts.Registry.SensitiveFields(j.Kind)
	if !registered {
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
	twicetype.Schedule
	Ticks   []twicetype.ScheduleTick
	Skipped int // among Ticks
}

func (recurringData) page() string { return "recurring" }

// recentTicks is how many ticks the page shows per schedule.
const recentTicks = 10

func (h *Handler) recurring(r *http.Request) (string, any, error) {
	res, err := h.store.ScheduleList(r.Context(), &twicestore.ScheduleListParams{})
	if err != nil {
		return "", nil, err
	}
	d := recurringData{}
	for _, sc := range res.Schedules {
		ticks, err := h.store.ScheduleTicks(r.Context(), &twicestore.ScheduleTicksParams{Name: sc.Name, Limit: recentTicks})
		if err != nil {
			return "", nil, err
		}
		row := scheduleRow{Schedule: sc, Ticks: ticks.Ticks}
		for _, t := range ticks.Ticks {
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
	Known   []ops.ToggleRow
	Unknown []ops.ToggleRow
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

// toggleRows computes the switches as 'twice toggles ls' does.
func (h *Handler) toggleRows(r *http.Request) ([]ops.ToggleRow, *ops.Catalog, error) {
	var file map[string]bool
	if h.opts.TogglesFile != "" {
		var err error
		if file, err = toggles.LoadFile(h.opts.TogglesFile); err != nil {
			return nil, nil, err
		}
	}
	var reg ops.Kinds
	if h.opts.Registry != nil {
		reg = h.opts.Registry
	}
	cat, err := ops.LoadCatalog(r.Context(), h.store, reg)
	if err != nil {
		return nil, nil, err
	}
	res, err := h.store.ToggleList(r.Context(), &twicestore.ToggleListParams{})
	if err != nil {
		return nil, nil, err
	}
	return ops.ToggleRows(cat, file, res.Toggles), cat, nil
}

// orphansData is the orphaned kinds page.
type orphansData struct{ Kinds []twicetype.OrphanKind }

func (orphansData) page() string { return "orphans" }

func (h *Handler) orphans(r *http.Request) (string, any, error) {
	res, err := h.store.JobOrphans(r.Context(), &twicestore.JobOrphansParams{AliveSince: time.Now().Add(-ops.NodeAliveWindow)})
	if err != nil {
		return "", nil, err
	}
	return "Orphaned kinds", orphansData{Kinds: res.Kinds}, nil
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
	res, err := h.store.MarkerPeek(r.Context(), &twicestore.MarkerParams{Handler: d.Handler, Key: d.Key})
	if err != nil {
		return "", nil, err
	}
	d.Asked, d.Processed, d.Marker = true, res.Processed, res.Marker
	return "Markers", d, nil
}
