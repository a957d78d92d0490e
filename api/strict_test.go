package api

import (
	"reflect"
	"strings"
	"testing"
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
		{create, `{"items":[{"sku":"A","Quantity":1}]}`, `"items.Quantity"`},
		{create, `{"items":[{"sku":"A","sku":"B"}]}`, "items.sku: given more than once"},
		{create, `{"timeout_ms":-0}`, "timeout_ms: -0 is not a valid value"},
		{create, `{"timeout_ms":-0.0e3}`, "negative zero"},
		{create, `{"timeout_ms":0}`, ""},
		{create, `{"timeout_ms":-1}`, ""},
		{create, `{"timeout_ms":-0.5}`, ""}, // the decoder refuses the fraction
		{create, `{"unknown":{"a":1,"a":2}}`, "unknown.a: given more than once"},
		{create, `{"user_id":`, ""},     // the decoder reports the syntax
		{create, `{"user_id" "u"}`, ""}, // idem
		{create, `[1,2,{"a":1,"a":1}]`, "a: given more than once"},
		{policy, `{"default_timeout_ms":60000,"categories":{"X":2000,"x":3000}}`, ""}, // map keys are data
		{policy, `{"default_timeout_ms":60000,"categories":{"x":2000,"x":3000}}`, "categories.x: given more than once"},
		{policy, `{"categories":{"x":-0}}`, "categories.x: -0"},
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
