package driverkit

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/twicetype"
)

// storedLimit is a limit setting as both drivers store it in JSON: the
// kind catalog's limits column, and the limit overrides and their
// history. Its tags are the stored form: renaming one changes what older
// rows read back as. A zero field is left out, so a kind with no limit
// stores "{}".
type storedLimit struct {
	Global               int         `json:"global,omitempty"`
	PerKey               int         `json:"per_key,omitempty"`
	KeyOrderSkipsRetries bool        `json:"key_order_skips_retries,omitempty"`
	Rate                 *storedRate `json:"rate,omitempty"`
	KeyRate              *storedRate `json:"key_rate,omitempty"`
	Concurrency          int         `json:"concurrency,omitempty"`
}

// storedRate is a rate limit, its period in nanoseconds (a
// time.Duration's own unit, so any period round-trips).
type storedRate struct {
	Limit    int   `json:"limit"`
	PeriodNS int64 `json:"period_ns"`
}

func toStoredRate(r twicetype.RateLimit) *storedRate {
	if r.IsZero() {
		return nil
	}
	return &storedRate{Limit: r.Limit, PeriodNS: int64(r.Period)}
}

func (r *storedRate) rate() twicetype.RateLimit {
	if r == nil {
		return twicetype.RateLimit{}
	}
	return twicetype.RateLimit{Limit: r.Limit, Period: time.Duration(r.PeriodNS)}
}

// LimitSettingJSON is s in its stored form.
func LimitSettingJSON(s twicetype.LimitSetting) string {
	l := s.Limit
	b, err := json.Marshal(storedLimit{Global: l.Global, PerKey: l.PerKey, KeyOrderSkipsRetries: l.KeyOrderSkipsRetries,
		Rate: toStoredRate(l.Rate), KeyRate: toStoredRate(l.KeyRate), Concurrency: s.Concurrency})
	if err != nil {
		panic(err) // numbers and booleans always encode
	}
	return string(b)
}

// ParseLimitSetting reads a setting LimitSettingJSON stored.
func ParseLimitSetting(text string) (twicetype.LimitSetting, error) {
	var st storedLimit
	if err := json.Unmarshal([]byte(text), &st); err != nil {
		return twicetype.LimitSetting{}, fmt.Errorf("read a stored limit: %w", err)
	}
	return twicetype.LimitSetting{Concurrency: st.Concurrency, Limit: twicetype.KindLimit{
		Global: st.Global, PerKey: st.PerKey, KeyOrderSkipsRetries: st.KeyOrderSkipsRetries,
		Rate: st.Rate.rate(), KeyRate: st.KeyRate.rate(),
	}}, nil
}

// OptionalLimitSettingJSON is s in its stored form, or nil (SQL NULL)
// for none: a history row's previous or new override.
func OptionalLimitSettingJSON(s *twicetype.LimitSetting) *string {
	if s == nil {
		return nil
	}
	text := LimitSettingJSON(*s)
	return &text
}

// LimitOverrideRow returns the reader of one row of twice_limit_overrides,
// its columns selected as scope, name, setting (as text), set_by, reason,
// set_at; set_at read as tm says.
func LimitOverrideRow[T, N any](tm Times[T, N]) func(dbrows.Scanner) (twicetype.LimitOverride, error) {
	return func(row dbrows.Scanner) (twicetype.LimitOverride, error) {
		var (
			o       twicetype.LimitOverride
			setting string
			setAt   T
		)
		if err := row.Scan(&o.Scope, &o.Name, &setting, &o.By, &o.Reason, &setAt); err != nil {
			return o, err
		}
		s, err := ParseLimitSetting(setting)
		if err != nil {
			return o, fmt.Errorf("%s %q: %w", o.Scope, o.Name, err)
		}
		o.LimitSetting, o.At = s, tm.At(setAt)
		return o, nil
	}
}

// LimitChangeRow returns the reader of one row of twice_limit_history,
// its columns selected as id, scope, name, previous and new (as text),
// set_by, reason, changed_at; changed_at read as tm says.
func LimitChangeRow[T, N any](tm Times[T, N]) func(dbrows.Scanner) (twicetype.LimitChange, error) {
	return func(row dbrows.Scanner) (twicetype.LimitChange, error) {
		var (
			c              twicetype.LimitChange
			previous, next sql.NullString
			changedAt      T
		)
		if err := row.Scan(&c.ID, &c.Scope, &c.Name, &previous, &next, &c.By, &c.Reason, &changedAt); err != nil {
			return c, err
		}
		var err error
		if c.Previous, err = parseNullSetting(previous); err != nil {
			return c, fmt.Errorf("change %d: %w", c.ID, err)
		}
		if c.New, err = parseNullSetting(next); err != nil {
			return c, fmt.Errorf("change %d: %w", c.ID, err)
		}
		c.At = tm.At(changedAt)
		return c, nil
	}
}

func parseNullSetting(text sql.NullString) (*twicetype.LimitSetting, error) {
	if !text.Valid {
		return nil, nil
	}
	s, err := ParseLimitSetting(text.String)
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// CatalogLimit reads the kind catalog's limits column: a kind's limits in
// LimitSettingJSON's stored form.
func CatalogLimit(text string) (twicetype.KindLimit, error) {
	s, err := ParseLimitSetting(text)
	return s.Limit, err
}
