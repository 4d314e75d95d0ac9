package twicetype

import "time"

// KindInfo is one job kind as a worker node published it to the store's
// kind catalog: what the stock CLI and the dashboard need to show, check
// and redact a kind that is not compiled into them. A catalogued kind
// stays after its node stops; LastSeen tells how fresh the entry is.
type KindInfo struct {
	Kind string
	// HandlerName is the name the kind's markers and steps are stored
	// under (KindOpts.HandlerName, the kind unless registered otherwise).
	// Empty, as a kind published before the catalog carried it reads,
	// means the kind.
	HandlerName string
	Queue       string
	Strategy    string // the delivery strategy's name, as the registry spells it
	FailClosed  bool   // the kind stays off while its kill switch state is unknown
	MaxAttempts int
	Timeout     time.Duration // zero: no per-job timeout beyond the client's
	// Args lists the fields of the kind's args as they appear in its JSON,
	// in the order the node gave them.
	Args []ArgField
	// Schedules lists the recurring schedules that enqueue the kind.
	Schedules []KindSchedule
	// Limit is the kind's flow control as the node registers it (its
	// compiled limits, before any override); the zero value limits
	// nothing.
	Limit KindLimit
	// Node is the node that last published the kind; the store sets it.
	Node string
	// LastSeen is when that node last published it; the store sets it.
	LastSeen time.Time
}

// Handler is the handler name the kind's markers and steps are stored
// under: HandlerName, or the kind when the entry has none.
func (k *KindInfo) Handler() string {
	if k.HandlerName != "" {
		return k.HandlerName
	}
	return k.Kind
}

// ArgField is one field of a kind's args. Its json tags are the form the
// drivers store it in: renaming one changes what older rows read back as.
type ArgField struct {
	Name string `json:"name"` // the JSON key
	// Type is the field's JSON type: one of the ArgType constants.
	Type string `json:"type"`
	// Sensitive fields are redacted wherever args are shown.
	Sensitive bool `json:"sensitive,omitempty"`
}

// The JSON types an ArgField can have. A field that can hold any JSON
// (an interface, a json.RawMessage) is ArgTypeAny.
const (
	ArgTypeString  = "string"
	ArgTypeNumber  = "number"
	ArgTypeInteger = "integer"
	ArgTypeBoolean = "boolean"
	ArgTypeArray   = "array"
	ArgTypeObject  = "object"
	ArgTypeAny     = "any"
)

// KindSchedule is a recurring schedule that enqueues a kind. Its json tags
// are the form the drivers store it in.
type KindSchedule struct {
	Name string `json:"name"`
	Spec string `json:"spec"`
}
