package twice

import "strings"

// ParseMetadataPairs reads metadata pairs written key=value (the CLI's
// --meta, the dashboard's and the JSON API's meta parameter) into a
// JobFilter's Metadata: the key is what precedes the first "=", the value
// all that follows. A pair with no "=" or no key, or a key given twice
// with two values, is an error wrapping ErrInvalidInput; empty strings
// are skipped (a blank form field). No pairs is a nil map.
func ParseMetadataPairs(pairs []string) (map[string]string, error) {
	var md map[string]string
	for _, kv := range pairs {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok:
			return nil, invalidf("metadata pair %q has no '=': give key=value, as in tenant=acme", kv)
		case k == "":
			return nil, invalidf("metadata pair %q has no key before '=': give key=value, as in tenant=acme", kv)
		}
		if old, dup := md[k]; dup && old != v {
			return nil, invalidf("metadata key %q is given twice, as %q and %q: a job's key has one value", k, old, v)
		}
		if md == nil {
			md = map[string]string{}
		}
		md[k] = v
	}
	return md, nil
}
