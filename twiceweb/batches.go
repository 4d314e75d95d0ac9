package twiceweb

import (
	"net/http"
	"strconv"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicetype"
)

// batchesData is the batch list page: one page of pageSize batches,
// newest first, paged by id as the job lists are.
type batchesData struct {
	Batches []*twicetype.Batch
	Before  int64 // the page continues below this id; 0 is the newest
	Next    int64 // the id to continue from; 0 when this is the last page
}

func (batchesData) page() string { return "batches" }

// Query renders a page start as a query string.
func (batchesData) Query(before int64) string {
	if before <= 0 {
		return ""
	}
	return "?before=" + strconv.FormatInt(before, 10)
}

func (h *Handler) batches(r *http.Request) (string, any, error) {
	var d batchesData
	if s := r.URL.Query().Get("before"); s != "" {
		var err error
		if d.Before, err = strconv.ParseInt(s, 10, 64); err != nil || d.Before <= 0 {
			return "", nil, badInputf("before=%q is not a batch id: give a positive integer", s)
		}
	}
	// One more than a page tells whether an older page follows.
	list, err := h.client.BatchList(r.Context(), &twice.BatchListOpts{Before: d.Before, Limit: pageSize + 1})
	if err != nil {
		return "", nil, err
	}
	if len(list) > pageSize {
		list = list[:pageSize]
		d.Next = list[pageSize-1].ID
	}
	d.Batches = list
	return "Batches", d, nil
}

// batch is one batch's page: the list page's row for it, counters and
// callback, which a job's page links to.
func (h *Handler) batch(r *http.Request) (string, any, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return "", nil, badInputf("%q is not a batch id: give a positive integer", r.PathValue("id"))
	}
	b, err := h.client.BatchGet(r.Context(), id)
	if err != nil {
		return "", nil, err
	}
	return "Batch " + strconv.FormatInt(id, 10), batchesData{Batches: []*twicetype.Batch{b}}, nil
}
