package api

import (
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/strictjson"
)

// TestCheckStrict: what the strict pass refuses and, as important, the
// valid JSON it must let through to the decoder untouched.
func TestCheckStrict(t *testing.T) {
	t.Parallel()
	create := reflect.TypeOf(&createOrderRequest{})
	policy := reflect.TypeOf(&putPolicyRequest{})
	tests := []struct {
		typ  reflect.Type
		body string
		want string // "" to pass; else in the message
	}{
		{create, `{"user_id":"u","items":[{"sku":"A","quantity":1}],"timeout_ms":1000}`, ""},
		{create, " {\n\t\"user_id\" : \"a\\\"b,}\" , \"items\" : [ { \"sku\":\"A\" , \"quantity\" : 1e0 } ] } ", ""},
		{create, `{"user\u005fid":"u","items":[]}`, ""},
		{create, `{"user_id":"u","user\u005fid":"v"}`, "user_id: given more than once"},
		{create, `{"User_Id":"u"}`, `did you mean "user_id"`},
		{create, `{"items":[{"sku":"A","Quantity":1}]}`, `"items[0].Quantity"`},
		{create, `{"items":[{"sku":"A"},{"sku":"A","sku":"B"}]}`, "items[1].sku: given more than once"},
		{create, `{"timeout_ms":-0}`, "timeout_ms: -0 is not a valid value"},
		{create, `{"timeout_ms":-0.0e3}`, "negative zero"},
		{create, `{"timeout_ms":0}`, ""},
		{create, `{"timeout_ms":-1}`, ""},
		{create, `{"timeout_ms":-0.5}`, ""}, // the decoder refuses the fraction
		{create, `{"unknown":{"a":1,"a":2}}`, "unknown.a: given more than once"},
		{create, `{"user_id":`, ""},     // the decoder reports the syntax
		{create, `{"user_id" "u"}`, ""}, // idem
		{create, `[1,2,{"a":1,"a":1}]`, "body[2].a: given more than once"},
		{create, `{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"a":11}`, "a: given more than once"}, // past smallObject, in the map
		{create, `{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"j\u0000":11}`, "NUL"},
		{create, `{"timeout_ms":-0e5}`, "negative zero"},
		{create, `{"timeout_ms":-e5}`, ""},   // not a number: the decoder's
		{create, `{"timeout_ms":-1e-9}`, ""}, // not zero
		{create, `{"items":[1,]}`, ""},       // syntax: the decoder's
		{create, `{"items":{,}}`, ""},
		{create, `{"items":[[],{}],"user_id":"u"}`, ""},
		{create, `{"user_id":"` + strings.Repeat("x", 100) + `","user_id":1}`, "user_id: given more than once"},
		{policy, `{"default_timeout_ms":60000,"categories":{"X":2000,"x":3000}}`, ""}, // map keys are data
		{policy, `{"default_timeout_ms":60000,"categories":{"x":2000,"x":3000}}`, "categories.x: given more than once"},
		{policy, `{"categories":{"x":-0}}`, "categories.x: -0"},
		{reflect.TypeOf(&struct{}{}), `{"a":{"b":1}}`, ""}, // a struct without fields (decodeEmpty) panicked here
		{reflect.TypeOf(&struct{}{}), `{"a":{"b":1,"b":2}}`, "a.b: given more than once"},
	}
	// Text: every string, value or key, known field or free-form payload.
	arm := reflect.TypeOf(&armTimerRequest{})
	webhook := reflect.TypeOf(&createWebhookRequest{})
	text := []struct {
		typ  reflect.Type
		body string
		want string
	}{
		{create, `{"user_id":"a\u0000b"}`, "user_id: must be valid UTF-8 without NUL (U+0000), got a NUL (\\u0000)"},
		{create, "{\"user_id\":\"a\x00b\"}", "user_id: must be valid UTF-8 without NUL (U+0000), got a NUL byte"},
		{create, "{\"user_id\":\"a\xff\xfeb\"}", "user_id: must be valid UTF-8 without NUL (U+0000), got invalid UTF-8"},
		{create, "{\"user_id\":\"\xed\xa0\x80\"}", "user_id: must be valid UTF-8"}, // a surrogate encoded in UTF-8
		{create, `{"items":[{"sku":"A"},{"sku":"\u0000"}]}`, "items[1].sku: must be valid UTF-8"},
		{create, `{"user_id":"\ud800"}`, "user_id: must be valid UTF-8 without NUL (U+0000), got an unpaired UTF-16 surrogate (\\ud800)"},
		{create, `{"user_id":"\udc00\ud800"}`, "unpaired UTF-16 surrogate (\\udc00)"},
		{create, `{"user_id":"\ud800\u0041"}`, "unpaired UTF-16 surrogate (\\ud800)"},
		{create, `{"user_id":"\ud83d\ude00 \u00e9 é 😀 \\u0000"}`, ""}, // a pair, accents, an escaped backslash
		{create, "{\"us\xffer\":1}", "body: a key must be valid UTF-8"},
		{create, `{"x\u0000":1}`, "body: a key must be valid UTF-8"},
		{arm, `{"payload":{"a":[{"b":"\u0000"}]}}`, "payload.a[0].b: must be valid UTF-8"},
		{arm, `{"payload":{"a":{"\u0000":1}}}`, "payload.a: a key must be valid UTF-8"},
		{arm, `{"fire_at":"2026\u0000"}`, "fire_at: must be valid UTF-8"},
		{policy, `{"categories":{"x\u0000":1}}`, "categories: a key must be valid UTF-8"},
		{webhook, `{"events":["order.closed","\u0000"]}`, "events[1]: must be valid UTF-8"},
		{webhook, "{\"url\":\"http://h/\xfe\"}", "url: must be valid UTF-8"},
		{webhook, `{"secret":"0123456789abcdef\u0000"}`, "secret: must be valid UTF-8"},
	}
	for _, tt := range text {
		tests = append(tests, struct {
			typ  reflect.Type
			body string
			want string
		}(tt))
	}
	for _, tt := range tests {
		err := checkStrict([]byte(tt.body), tt.typ)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.body, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want an error with %q", tt.body, err, tt.want)
		}
	}
}

func BenchmarkDecodeCreateOrder(b *testing.B) {
	body := []byte(`{"user_id":"user-12345","items":[{"sku":"MUG-1","quantity":2},{"sku":"TEE-9","quantity":1},{"sku":"CAP-3","quantity":5}],"timeout_ms":1800000}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeCreateOrder(body); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCheckStrictLimits: the nesting, key and element limits, at and one
// past each, and the path each error names.
func TestCheckStrictLimits(t *testing.T) {
	t.Parallel()
	create := reflect.TypeOf(&createOrderRequest{})
	arm := reflect.TypeOf(&armTimerRequest{})
	policy := reflect.TypeOf(&putPolicyRequest{})
	nested := func(levels int) string { // the body's object and levels-1 inside it
		return `{"payload":` + strings.Repeat(`{"a":`, levels-2) + "{}" + strings.Repeat("}", levels-2) + "}"
	}
	arrays := func(levels int) string {
		return `{"payload":{"a":` + strings.Repeat("[", levels-2) + strings.Repeat("]", levels-2) + "}}"
	}
	keys := func(n int) string {
		var b strings.Builder
		b.WriteString(`{"default_timeout_ms":60000,"categories":{`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"c%d":1000`, i)
		}
		b.WriteString("}}")
		return b.String()
	}
	items := func(n int) string {
		return `{"items":[` + strings.Repeat(`{},`, n-1) + `{}]}`
	}
	tests := []struct {
		name string
		typ  reflect.Type
		body string
		want string // "" to pass
	}{
		{"64 levels", arm, nested(MaxJSONDepth), ""},
		{"65 levels", arm, nested(MaxJSONDepth + 1), "payload" + strings.Repeat(".a", MaxJSONDepth-1) + ": JSON nested more than 64 levels deep"},
		{"64 levels of arrays", arm, arrays(MaxJSONDepth), ""},
		{"65 levels of arrays", arm, arrays(MaxJSONDepth + 1), "payload.a" + strings.Repeat("[0]", MaxJSONDepth-2) + ": JSON nested more than 64 levels deep"},
		{"a megabyte of [", create, `{"user_id":` + strings.Repeat("[", 1<<20), "user_id" + strings.Repeat("[0]", MaxJSONDepth-1) + ": JSON nested"},
		{"1000 keys", policy, keys(MaxJSONKeys - 1), ""}, // and default_timeout_ms
		{"1001 keys", policy, keys(MaxJSONKeys + 1), "categories: more than 1000 keys in one object"},
		{"1000 items", create, items(MaxJSONElements), ""},
		{"1001 items", create, items(MaxJSONElements + 1), "items: more than 1000 elements"},
		{"a payload's long array", arm, `{"payload":{"a":[` + strings.Repeat("1,", 5000) + `1]}}`, ""},
		{"a long key in a path", create, `{"` + strings.Repeat("k", 1000) + `":{"a":1,"a":2}}`, strings.Repeat("k", 64) + "….a: given more than once"},
	}
	for _, tt := range tests {
		err := checkStrict([]byte(tt.body), tt.typ)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %.300v, want an error with %q", tt.name, err, tt.want)
		case err != nil && hourglass.ErrorCode(err) != hourglass.CodeInvalidArgument:
			t.Errorf("%s: %v, want invalid_argument", tt.name, err)
		}
	}
}

// TestCheckStrictWorkIsLinear: the hostile bodies cost the scanner a few
// steps per byte and little memory, where the recursive, pairwise scanner
// took 33 s for the keys and hundreds of MB of stack for the nesting.
func TestCheckStrictWorkIsLinear(t *testing.T) {
	for name, body := range hostileBodies() {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		sc, err := strictjson.Scan(body, reflect.TypeOf(&createOrderRequest{}))
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		if name != "1 MiB of [" && err == nil { // a body that is not an object is decodeJSON's to refuse
			t.Errorf("%s: accepted", name)
		}
		if sc.Work > 2*len(body) {
			t.Errorf("%s: %d steps beyond reading, for %d bytes", name, sc.Work, len(body))
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
			t.Errorf("%s: allocated %d bytes", name, alloc)
		}
		if took > 100*time.Millisecond {
			t.Errorf("%s: took %v", name, took)
		}
		t.Logf("%s: %v, %v, %d steps", name, err, took, sc.Work)
	}
}
