package twiceweb

import (
	"net/http"

	"github.com/twicejobs/twice"
)

// The drain page answers the question of a version retirement: can this
// kind's handler be removed? It shows twice.Client.KindDrain's report, the
// same one `twice kinds drain` prints, so the dashboard and a deploy
// script never disagree.

// drainData is one kind's drain report.
type drainData struct {
	*twice.KindDrainReport
}

func (drainData) page() string { return "drain" }

// drainRow is one class of jobs on the drain page.
type drainRow struct {
	Class string
	Count int
	IDs   []int64
	More  bool
	// Filter is the jobs page's query for the class; empty for a class the
	// listing cannot select (a retry is a scheduled job that ran before).
	Filter string
}

// Rows lists the job classes in the order the verdict names them.
func (d drainData) Rows() []drainRow {
	r := d.KindDrainReport
	row := func(class string, n int, filter string) drainRow {
		ids := r.JobIDs[class]
		return drainRow{Class: class, Count: n, IDs: ids, More: n > len(ids), Filter: filter}
	}
	return []drainRow{
		row("waiting", r.Waiting, "state=available&timing=due"),
		row("scheduled", r.Scheduled, "state=available&timing=scheduled"),
		row("retrying", r.Retrying, "state=available&timing=scheduled"),
		row("running", r.Running, "state=running"),
		row("parked", r.Parked, "state=waiting"),
		row("dead", r.Dead, "state=dead"),
	}
}

// drain serves GET /kinds/{kind}/drain. An unknown kind is a 400 naming
// the closest known one.
func (h *Handler) drain(r *http.Request) (string, any, error) {
	rep, err := h.client.KindDrain(r.Context(), r.PathValue("kind"))
	if err != nil {
		return "", nil, err
	}
	return "Drain " + rep.Kind, drainData{KindDrainReport: rep}, nil
}
