package twice

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

// freshStrictUnmarshal is strictUnmarshal with a new decoder each call, as
// it was before the pool: the reference the pooled one must match.
func freshStrictUnmarshal(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("unexpected data after the JSON object")
	}
	return nil
}

type strictArgs struct {
	A int      `json:"a"`
	B string   `json:"b,omitempty"`
	C []string `json:"c,omitempty"`
	D *struct {
		E int `json:"e"`
	} `json:"d,omitempty"`
}

// TestStrictUnmarshalReusesDecoders decodes a sequence of good and bad args
// through the pool, many times over so that decoders are reused after every
// kind of input, and checks each value and error against a fresh decoder's.
func TestStrictUnmarshalReusesDecoders(t *testing.T) {
	inputs := []string{
		`{"a":1}`,
		`{"a":2,"b":"x","c":["p","q"]}`,
		`  {"a":3}  `,
		`{"a":4,"zzz":1}`,
		`{"a":5,"d":{"e":6}}`,
		`{"a":6,"d":{"e":6,"f":7}}`,
		`{"a":7} {"a":8}`,
		`{"a":9}x`,
		`{"a":"nine"}`,
		`{"a":10`,
		``,
		`null`,
		`{"a":11}` + "\n",
		`{"b":"` + string(bytes.Repeat([]byte("y"), 2000)) + `"}`,
		`{}`,
	}
	for round := range 5 {
		for _, in := range inputs {
			var got, want strictArgs
			gotErr := strictUnmarshal([]byte(in), &got)
			wantErr := freshStrictUnmarshal([]byte(in), &want)
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Fatalf("round %d, %q: error %v, want %v", round, in, gotErr, wantErr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d, %q: decoded %+v, want %+v", round, in, got, want)
			}
		}
	}
}

// BenchmarkStrictUnmarshal decodes a small args object, as every job does
// once before its handler runs: pooled is strictUnmarshal, fresh builds a
// decoder each time (the code before issue 15).
func BenchmarkStrictUnmarshal(b *testing.B) {
	raw := []byte(`{"run":123456789,"n":42}`)
	type args struct {
		Run int64 `json:"run"`
		N   int64 `json:"n"`
		At  int64 `json:"at,omitempty"`
	}
	for _, bc := range []struct {
		name string
		f    func([]byte, any) error
	}{{"pooled", strictUnmarshal}, {"fresh", freshStrictUnmarshal}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var v args
				if err := bc.f(raw, &v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
