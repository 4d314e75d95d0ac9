package twice

import (
	"context"
	"fmt"

	"github.com/twicejobs/twice/twicestore"
	"github.com/twicejobs/twice/twicetype"
)

// MarkerParams name one idempotency marker: the handler that claimed it
// and the message key it claimed.
type MarkerParams struct {
	Handler string
	Key     string
}

// MarkerReleaseParams name the marker to release and say who releases it
// and why, for the log.
type MarkerReleaseParams struct {
	MarkerParams
	By     string
	Reason string
}

func (p *MarkerParams) validate() error {
	if p == nil || p.Handler == "" || p.Key == "" {
		return invalidf("name the marker: both the handler and the key are required")
	}
	if err := ValidateKey("handler", p.Handler); err != nil {
		return invalidf("%v", err)
	}
	if err := ValidateKey("key", p.Key); err != nil {
		return invalidf("%v", err)
	}
	return nil
}

// MarkerGet returns the marker a handler holds for a key: when it was
// claimed and by which job and lease epoch. A key the handler has not
// processed is an error wrapping ErrMarkerNotFound.
func (c *Client) MarkerGet(ctx context.Context, p *MarkerParams) (*twicetype.Marker, error) {
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("twice: get marker: %w", err)
	}
	res, err := c.store.MarkerPeek(ctx, &twicestore.MarkerParams{Handler: p.Handler, Key: p.Key})
	if err != nil {
		return nil, fmt.Errorf("twice: get marker: %w", err)
	}
	if !res.Processed {
		return nil, fmt.Errorf("twice: handler %q has no marker for key %q: %w", p.Handler, p.Key, ErrMarkerNotFound)
	}
	return res.Marker, nil
}

// MarkerRelease deletes a marker, so the next delivery of its message runs
// the effect again. Use it after checking that the effect did not happen,
// typically for a ClaimBefore job dead-lettered with ErrEffectUncertain;
// then retry the job. It returns the marker it released; a marker that
// does not exist is an error wrapping ErrMarkerNotFound.
func (c *Client) MarkerRelease(ctx context.Context, p *MarkerReleaseParams) (*twicetype.Marker, error) {
	return c.markerRelease(ctx, c.store, p)
}

// MarkerReleaseTx is MarkerRelease in the caller's transaction.
func (c *Client) MarkerReleaseTx(ctx context.Context, tx any, p *MarkerReleaseParams) (*twicetype.Marker, error) {
	exec, err := c.adminExec("release marker", tx)
	if err != nil {
		return nil, err
	}
	return c.markerRelease(ctx, exec, p)
}

func (c *Client) markerRelease(ctx context.Context, exec twicestore.Executor, p *MarkerReleaseParams) (*twicetype.Marker, error) {
	if p == nil {
		return nil, fmt.Errorf("twice: release marker: %w", invalidf("name the marker: both the handler and the key are required"))
	}
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("twice: release marker: %w", err)
	}
	if err := checkFields(byField(p.By), reasonField(p.Reason)); err != nil {
		return nil, fmt.Errorf("twice: release marker: %w", err)
	}
	sp := &twicestore.MarkerParams{Handler: p.Handler, Key: p.Key}
	res, err := exec.MarkerPeek(ctx, sp)
	if err != nil {
		return nil, fmt.Errorf("twice: release marker: %w", err)
	}
	if !res.Processed {
		return nil, fmt.Errorf("twice: handler %q has no marker for key %q, nothing to release: %w", p.Handler, p.Key, ErrMarkerNotFound)
	}
	if err := exec.MarkerRelease(ctx, sp); err != nil {
		return nil, fmt.Errorf("twice: %w", err) // the store's error names the marker
	}
	by := byOr(p.By)
	c.logAction(ctx, "marker released", by, p.Reason, "handler", p.Handler, "key", p.Key)
	return res.Marker, nil
}
