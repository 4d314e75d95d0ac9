package twice

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
)

// The drift guard without a database: a CI pipeline compares the worker
// binary it just built with the one deployed now, each describing its
// kinds' args as an ArgsSchema ('kinds schema' of a twicecli binary).

// ArgsSchemaFormat names the JSON form of ArgsSchema; a document with
// another Format is not one (a binary that is not a twice worker, or one
// too old to describe its args).
const ArgsSchemaFormat = "twice.args-schema.v1"

// ArgsSchema describes the args of every kind a registry holds, as a
// worker binary prints it for another build to be checked against.
type ArgsSchema struct {
	// Format is ArgsSchemaFormat.
	Format string `json:"format"`
	// Binary names where the schema came from (a path); set by whoever
	// reads it, it is how CheckArgsAgainst's changes name the old shape.
	Binary string `json:"binary,omitempty"`
	// Kinds lists the registered kinds, ordered by kind.
	Kinds []KindSchema `json:"kinds"`
}

// KindSchema is one kind's args in an ArgsSchema. Args is nil when the
// args type encodes or decodes itself, so its fields are unknown.
type KindSchema struct {
	Kind string     `json:"kind"`
	Args []ArgField `json:"args"`
}

// ArgsSchema describes the args of every kind r registers.
func (r *Registry) ArgsSchema() *ArgsSchema {
	s := &ArgsSchema{Format: ArgsSchemaFormat, Kinds: []KindSchema{}}
	for _, kind := range r.Kinds() {
		e := r.lookup(kind)
		var fields []ArgField
		if !shapeOf(e.argsType).customDecode {
			fields = ArgFields(e.argsType)
		}
		s.Kinds = append(s.Kinds, KindSchema{Kind: kind, Args: fields})
	}
	return s
}

// Validate refuses a document that is not an ArgsSchema: another Format,
// a kind with no name or listed twice.
func (s *ArgsSchema) Validate() error {
	if s.Format != ArgsSchemaFormat {
		return fmt.Errorf("format %q is not %q: this is not the args schema of a twice worker (or of one built before twice could describe its args)", s.Format, ArgsSchemaFormat)
	}
	seen := make(map[string]bool, len(s.Kinds))
	for _, k := range s.Kinds {
		switch {
		case k.Kind == "":
			return errors.New("a kind has no name")
		case seen[k.Kind]:
			return fmt.Errorf("kind %q is listed twice", k.Kind)
		}
		seen[k.Kind] = true
	}
	return nil
}

// CheckArgsAgainst compares the args of the kinds r registers (all of
// them, or those named) with prev, the schema of the build deployed now,
// without a store: a field prev has and r's args lack (removed or
// renamed), or of a type they cannot read, is incompatible, because the
// deployed build enqueues it and its jobs would fail under the new one;
// added fields and sensitive flags are compatible. A kind prev lacks is
// new; one whose args either side cannot describe is unchecked. The
// verdicts and ArgsReport.Err are CheckArgs's; KindOpts.ArgsChangeAllowed
// makes an incompatible change allowed.
//
// A kind named that r does not register, or a prev that is not an args
// schema, is refused with an error wrapping ErrInvalidInput.
func (r *Registry) CheckArgsAgainst(prev *ArgsSchema, kinds ...string) (*ArgsReport, error) {
	if prev == nil {
		return nil, fmt.Errorf("twice: check args: %w", invalidf("no schema to check against"))
	}
	if err := prev.Validate(); err != nil {
		return nil, fmt.Errorf("twice: check args against %s: %w", cmp.Or(prev.Binary, "a schema"), invalidf("%s", err.Error()))
	}
	if len(kinds) == 0 {
		kinds = r.Kinds()
	}
	before := make(map[string]*KindSchema, len(prev.Kinds))
	for i := range prev.Kinds {
		before[prev.Kinds[i].Kind] = &prev.Kinds[i]
	}
	rep := &ArgsReport{Kinds: []KindArgs{}}
	for _, kind := range kinds {
		e := r.lookup(kind)
		if e == nil {
			return nil, errUnknownKind("check args of kind %q: this binary does not register it (it registers %s)",
				kind, strings.Join(r.Kinds(), ", "))
		}
		k := KindArgs{Kind: kind, AllowedReason: e.opts.ArgsChangeAllowed}
		ours := ArgFields(e.argsType)
		old := before[kind]
		if ours == nil || shapeOf(e.argsType).customDecode || (old != nil && old.Args == nil) {
			k.Verdict = ArgsUnchecked
			rep.Kinds = append(rep.Kinds, k)
			continue
		}
		var d argsDiff
		if old != nil {
			binary := cmp.Or(prev.Binary, "checked against")
			d.compare(ours, old.Args, func(ch *ArgsChange) { ch.Binary = binary })
		}
		k.conclude(&d, old == nil)
		rep.Kinds = append(rep.Kinds, k)
	}
	return rep, nil
}
