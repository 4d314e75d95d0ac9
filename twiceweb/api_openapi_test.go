package twiceweb

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/twicejobs/twice"
	"github.com/twicejobs/twice/twicesqlite"
)

// TestAPIOpenAPIMatchesRoutes walks the API's real mux and the OpenAPI
// document and fails when either has a path or method the other lacks.
func TestAPIOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	store, err := twicesqlite.Open(t.Context(), filepath.Join(t.TempDir(), "twice.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	client, err := twice.NewClient(store, twice.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(client, Options{})
	if err != nil {
		t.Fatal(err)
	}

	var doc struct {
		OpenAPI string `json:"openapi"`
		Paths   map[string]map[string]struct {
			Parameters []struct {
				Name string `json:"name"`
				In   string `json:"in"`
			} `json:"parameters"`
			Responses map[string]json.RawMessage `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q, want 3.1.0", doc.OpenAPI)
	}
	methods := []string{"GET", "POST", "PUT", "DELETE", "PATCH"}
	param := regexp.MustCompile(`\{([a-z_]+)\}`)

	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for m, op := range ops {
			method := strings.ToUpper(m)
			if !slices.Contains(methods, method) {
				t.Errorf("%s: %q is not an operation the test knows", path, m)
				continue
			}
			pattern := method + " " + path
			documented[pattern] = true
			if len(op.Responses) == 0 {
				t.Errorf("%s documents no response", pattern)
			}
			// Every {param} of the path is declared.
			for _, p := range param.FindAllStringSubmatch(path, -1) {
				if !slices.ContainsFunc(op.Parameters, func(q struct {
					Name string `json:"name"`
					In   string `json:"in"`
				}) bool {
					return q.Name == p[1] && q.In == "path"
				}) {
					t.Errorf("%s does not declare its path parameter %q", pattern, p[1])
				}
			}
			// The real mux routes the documented operation to the same
			// pattern.
			if got := routed(h, method, path); got != pattern {
				t.Errorf("the document has %s; the mux routes it to %q", pattern, got)
			}
		}
		// The mux takes no method on the path that the document lacks.
		for _, method := range methods {
			if _, ok := ops[strings.ToLower(method)]; ok {
				continue
			}
			if got := routed(h, method, path); got != "" {
				t.Errorf("the mux routes %s %s to %q; the document lacks it", method, path, got)
			}
		}
	}
	for _, rt := range h.api.routes() {
		if !documented[rt.pattern] {
			t.Errorf("the mux has %s; the document lacks it", rt.pattern)
		}
	}
	if len(documented) != len(h.api.routes()) {
		t.Errorf("the document has %d operations, the mux %d routes", len(documented), len(h.api.routes()))
	}

	// Every $ref resolves.
	var whole map[string]any
	_ = json.Unmarshal(openAPIDocument, &whole)
	for _, ref := range regexp.MustCompile(`"\$ref":\s*"#/([^"]+)"`).FindAllStringSubmatch(string(openAPIDocument), -1) {
		var node any = whole
		for _, part := range strings.Split(ref[1], "/") {
			m, _ := node.(map[string]any)
			node = m[part]
		}
		if node == nil {
			t.Errorf("$ref #/%s resolves to nothing", ref[1])
		}
	}

	// The document is what the route serves.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "http://localhost/api/v1/openapi.json", nil))
	if rec.Code != http.StatusOK || !json.Valid(rec.Body.Bytes()) || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET openapi.json: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
}

// routed is the pattern the API's mux routes method path to, with the
// path's parameters filled in; "" when no route takes it.
func routed(h *Handler, method, path string) string {
	filled := regexp.MustCompile(`\{[a-z_]+\}`).ReplaceAllString(path, "p1")
	r := httptest.NewRequest(method, "http://localhost"+filled, nil)
	_, pattern := h.api.mux.Handler(r)
	return pattern
}

// TestAPIOpenAPIMatchesBodies holds each documented schema's properties
// equal to the JSON fields of the Go type the API decodes or encodes, so
// a field added to one (an enqueue's "delay", "force") is in the other.
func TestAPIOpenAPIMatchesBodies(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	for schema, v := range map[string]any{
		"EnqueueRequest":  enqueueRequest{},
		"EnqueueResponse": enqueueResponse{},
		"Job":             apiJob{},
		"JobDetail":       apiJobDetail{}, // and Job's, by allOf
		"JobList":         jobListResponse{},
		"ReasonRequest":   reasonRequest{},
		"JobAction":       jobActionResponse{},
		"PauseRequest":    pauseRequest{},
		"Queue":           queueResponse{},
		"SwitchRequest":   switchRequest{},
		"Switch":          switchResponse{},
		"WaitReason":      twice.WaitReason{},
		"WaitLimit":       twice.WaitLimit{},
		// Problem is left out: twicehttp's idempotency replies add
		// original_status to the problems this package writes.
	} {
		s, ok := doc.Components.Schemas[schema]
		if !ok {
			t.Errorf("openapi.json has no schema %s", schema)
			continue
		}
		documented := slices.Sorted(maps.Keys(s.Properties))
		if got := jsonFieldNames(reflect.TypeOf(v)); !slices.Equal(got, documented) {
			t.Errorf("schema %s has properties %v; the Go type %T has JSON fields %v", schema, documented, v, got)
		}
	}
}

// jsonFieldNames are the JSON names of a struct's exported fields,
// sorted.
func jsonFieldNames(typ reflect.Type) []string {
	var names []string
	for f := range typ.Fields() {
		tag := f.Tag.Get("json")
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
