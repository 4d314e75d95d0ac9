package driverkit

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/twicejobs/twice/internal/dbrows"
	"github.com/twicejobs/twice/twicetype"
)

// CatalogArgField is an args field as the drivers store it in the kind
// catalog's args column: the published field and, for a sensitive one,
// when a publish last marked it so. Its JSON is a superset of
// twicetype.ArgField's, so the column reads back as []ArgField too.
type CatalogArgField struct {
	twicetype.ArgField
	// SensitiveAt is when a publish last marked the field sensitive, in
	// unix microseconds; zero for a field that is not sensitive.
	SensitiveAt int64 `json:"sensitive_at_us,omitempty"`
}

// MergeCatalogArgs is the args column of a kind published at now with
// fields next over the stored column prev ("" for a kind not catalogued
// yet): next's fields in next's order; each field a publish at or after
// keepSince marked sensitive still marked, with that publish's time; and
// after them such fields next does not list at all, because the jobs the
// nodes that marked them enqueue carry them. A zero keepSince keeps
// nothing of prev. Both drivers call it in CatalogPublish, with concurrent
// publishes held off until theirs commits, and store what it returns.
func MergeCatalogArgs(prev string, next []twicetype.ArgField, now, keepSince time.Time) (string, error) {
	kept := map[string]CatalogArgField{}
	var stored []CatalogArgField
	if prev != "" && !keepSince.IsZero() {
		if err := json.Unmarshal([]byte(prev), &stored); err != nil {
			return "", fmt.Errorf("read the stored args fields: %w", err)
		}
		for _, f := range stored {
			if f.Sensitive && f.SensitiveAt >= keepSince.UnixMicro() {
				kept[f.Name] = f
			}
		}
	}
	out := make([]CatalogArgField, 0, len(next))
	listed := make(map[string]bool, len(next))
	for _, f := range next {
		listed[f.Name] = true
		merged := CatalogArgField{ArgField: f}
		if f.Sensitive {
			merged.SensitiveAt = now.UnixMicro()
		} else if k, ok := kept[f.Name]; ok {
			merged.Sensitive, merged.SensitiveAt = true, k.SensitiveAt
		}
		out = append(out, merged)
	}
	for _, f := range stored {
		if _, ok := kept[f.Name]; ok && !listed[f.Name] {
			out = append(out, f)
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return "", fmt.Errorf("encode the args fields: %w", err)
	}
	return string(b), nil
}

// SchedulesJSON encodes a kind's schedules for their column; none is "[]".
// The twicetype structs' json tags are the stored form, the same on every
// driver.
func SchedulesJSON(k twicetype.KindInfo) string {
	s := k.Schedules
	if s == nil {
		s = []twicetype.KindSchedule{}
	}
	b, _ := json.Marshal(s) // structs of strings always encode
	return string(b)
}

// KindInfoRow returns the reader of one row of twice_kinds, its columns
// selected as kind, queue, strategy, fail_closed, max_attempts, timeout_us,
// args, schedules, limits (the JSON columns as text), handler_name, node,
// last_seen; last_seen read as tm says.
func KindInfoRow[T, N any](tm Times[T, N]) func(dbrows.Scanner) (twicetype.KindInfo, error) {
	return func(r dbrows.Scanner) (twicetype.KindInfo, error) {
		var (
			k                       twicetype.KindInfo
			timeout                 int64
			args, schedules, limits string
			lastSeen                T
		)
		if err := r.Scan(&k.Kind, &k.Queue, &k.Strategy, &k.FailClosed, &k.MaxAttempts, &timeout,
			&args, &schedules, &limits, &k.HandlerName, &k.Node, &lastSeen); err != nil {
			return k, err
		}
		if err := json.Unmarshal([]byte(args), &k.Args); err != nil {
			return k, fmt.Errorf("kind %q args: %w", k.Kind, err)
		}
		if err := json.Unmarshal([]byte(schedules), &k.Schedules); err != nil {
			return k, fmt.Errorf("kind %q schedules: %w", k.Kind, err)
		}
		var err error
		if k.Limit, err = CatalogLimit(limits); err != nil {
			return k, fmt.Errorf("kind %q: %w", k.Kind, err)
		}
		k.Timeout = time.Duration(timeout) * time.Microsecond
		k.LastSeen = tm.At(lastSeen)
		return k, nil
	}
}
