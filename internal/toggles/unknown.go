package toggles

import (
	"fmt"
	"strings"
)

// UnknownKey is a toggle key that names no registered kind. Such a key
// switches nothing, which is why it must be logged loudly: the operator
// believes a kind is off when it is not.
type UnknownKey struct {
	// Key is the key as the source spelled it.
	Key string
	// Suggestion is the closest registered kind, as registered, or "" when
	// none is close enough to be a plausible typo.
	Suggestion string
	// Distance is the edit distance between Key and Suggestion, ignoring
	// case; 0 when there is no suggestion.
	Distance int
}

// String is the log message, e.g. `toggle key "legacy.partner-benfits.v1"
// names no registered kind; did you mean legacy.partner-benefits.v1?`.
func (u UnknownKey) String() string {
	msg := fmt.Sprintf("toggle key %q names no registered kind", u.Key)
	if u.Suggestion != "" {
		msg += "; did you mean " + u.Suggestion + "?"
	}
	return msg
}

// Unknown returns the keys (from any source) that name no registered kind,
// each with the closest registered kind by edit distance when it is within
// max(2, len(key)/3) edits, so a typo is suggested but an unrelated key is
// not. Matching ignores case: a key equal to a kind but for case is not
// unknown. Keys repeated (in any case) are reported once, in first-seen
// order. Ties between suggestions go to the alphabetically first kind.
func Unknown(keys []string, registered []string) []UnknownKey {
	kinds := make(map[string]bool, len(registered))
	lower := make([]string, len(registered))
	for i, r := range registered {
		lower[i] = strings.ToLower(r)
		kinds[lower[i]] = true
	}
	var out []UnknownKey
	seen := make(map[string]bool)
	for _, k := range keys {
		lk := strings.ToLower(k)
		if kinds[lk] || seen[lk] {
			continue
		}
		seen[lk] = true
		u := UnknownKey{Key: k}
		limit := max(2, len([]rune(lk))/3)
		for i, r := range registered {
			d := editDistance(lk, lower[i])
			if d > limit {
				continue
			}
			if u.Suggestion == "" || d < u.Distance || (d == u.Distance && r < u.Suggestion) {
				u.Suggestion, u.Distance = r, d
			}
		}
		out = append(out, u)
	}
	return out
}

// editDistance is the optimal-string-alignment distance between a and b, in
// runes: insertions, deletions, substitutions and swaps of two adjacent
// runes each cost one. Swaps count once because "benfeits" for "benefits"
// is one slip of the fingers, and should rank as close as a missing letter.
func editDistance(a, b string) int {
	s, t := []rune(a), []rune(b)
	// Three rows suffice: the swap looks two rows back.
	prev2 := make([]int, len(t)+1)
	prev := make([]int, len(t)+1)
	cur := make([]int, len(t)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(s); i++ {
		cur[0] = i
		for j := 1; j <= len(t); j++ {
			cost := 1
			if s[i-1] == t[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && s[i-1] == t[j-2] && s[i-2] == t[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(t)]
}
