package driverkit

import (
	"errors"
	"fmt"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// PeekResult is MarkerPeek's answer from a read of the marker of p: not
// processed when there is none.
func PeekResult(p *twicestore.MarkerParams, m *twicetype.Marker, err error) (*twicestore.MarkerPeekResult, error) {
	switch {
	case errors.Is(err, twicestore.ErrNotFound):
		return &twicestore.MarkerPeekResult{}, nil
	case err != nil:
		return nil, fmt.Errorf("peek marker %q/%q: %w", p.Handler, p.Key, err)
	}
	return &twicestore.MarkerPeekResult{Processed: true, Marker: m}, nil
}
