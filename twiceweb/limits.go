package twiceweb

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/twicejobs/twice"
)

// limitsData is the flow-control page: every kind the dashboard's client
// registers with a limit, with its usage.
type limitsData struct {
	Kinds []limitRow
}

func (limitsData) page() string { return "limits" }

// limitRow is one limited kind as the limits page shows it: the usage,
// with its limits and counts put in words once here, so the template
// stays a layout.
type limitRow struct {
	twice.LimitUsage
	// Limits is the kind's limits in a few words: "global 10, per key 1,
	// rate 100/1s".
	Limits string
	// Slots is the running jobs against the global limit ("3 / 10"), or
	// the running jobs alone without one.
	Slots string
	// Full: every global slot is taken, so due jobs wait for one.
	Full bool
	// Keyed: the kind has a per-key limit or rate, so Keys and BusyKeys
	// mean something.
	Keyed bool
	// Rate is the starts in the rate window against the limit ("42 / 100
	// per 1s"); empty without a kind-wide rate limit.
	Rate string
}

func newLimitRow(u twice.LimitUsage) limitRow {
	l := u.Limit
	row := limitRow{LimitUsage: u, Keyed: l.PerKey > 0 || !l.KeyRate.IsZero(), Slots: fmt.Sprint(u.Running),
		Limits: strings.Join(l.Phrases(), ", ")}
	if l.Global > 0 {
		row.Slots = fmt.Sprintf("%d / %d", u.Running, l.Global)
		row.Full = u.Running >= l.Global
	}
	if !l.Rate.IsZero() {
		row.Rate = fmt.Sprintf("%d / %d per %s", u.RateUsed, l.Rate.Limit, l.Rate.PeriodText())
	}
	return row
}

// limits serves the flow-control page. The limits are those of the kinds
// the dashboard's client registers: a dashboard built without a kind's
// registration does not know its limits, and the page says so.
func (h *Handler) limits(r *http.Request) (string, any, error) {
	usage, err := h.client.LimitList(r.Context())
	if err != nil {
		return "", nil, err
	}
	d := limitsData{}
	for _, u := range usage {
		d.Kinds = append(d.Kinds, newLimitRow(u))
	}
	return "Limits", d, nil
}
