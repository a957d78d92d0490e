package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/strictjson"
)

// Fuzz targets of the request decoders and of the strict scanner under them.
// Besides "no panic", each checks what a decoder promises: a refusal is an
// invalid_argument *hourglass.Error with a message; what it accepts passes
// the domain's validation and holds only text every store keeps; and it
// costs at most a constant per byte of input. A target that only looks for
// crashes did not find the two 1 MiB bodies of issue 19 (quadratic keys,
// unbounded recursion): cost is measured here, not only correctness.
//
// Seeds are added in code; only inputs a run found are kept under
// testdata/fuzz (FuzzDecodeCreateOrder's older corpus is there).

// Work bounds per input byte. The scanner counts its own steps beyond
// reading each byte once (comparisons and lookups of keys); allocations are
// the runtime's count, whatever allocates them (the decoder included).
const (
	maxScanWorkPerByte  = 16
	maxScanWorkConst    = 256
	maxAllocPerByte     = 64
	maxAllocConst       = 256 << 10
	maxScanAllocPerByte = 8
	maxScanAllocConst   = 32 << 10
)

// requestTypes are the types the API decodes bodies into.
var requestTypes = []reflect.Type{
	reflect.TypeFor[*createOrderRequest](),
	reflect.TypeFor[*payRequest](),
	reflect.TypeFor[*putProductRequest](),
	reflect.TypeFor[*putPolicyRequest](),
	reflect.TypeFor[*createWebhookRequest](),
	reflect.TypeFor[*armTimerRequest](),
	reflect.TypeFor[*struct{}](),
}

// allocated returns the bytes fn allocated. Other goroutines of the fuzz
// worker allocate little, and the bounds have room for it.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// checkRefusal fails unless err is an invalid_argument *hourglass.Error with
// a message.
func checkRefusal(t *testing.T, err error) {
	t.Helper()
	var he *hourglass.Error
	if !errors.As(err, &he) || he.Code != hourglass.CodeInvalidArgument || he.Message == "" {
		t.Fatalf("error %#v is not an invalid_argument *hourglass.Error with a message", err)
	}
}

// checkCost fails when decoding body allocated more than the bound for its
// length.
func checkCost(t *testing.T, body []byte, decode func()) {
	t.Helper()
	if n := allocated(decode); n > uint64(maxAllocPerByte*len(body)+maxAllocConst) {
		t.Fatalf("decoding %d bytes allocated %d bytes (bound %d per byte + %d)", len(body), n, maxAllocPerByte, maxAllocConst)
	}
}

// checkText fails when any string reachable from v (fields, elements, map
// keys, and the strings and keys of JSON held as json.RawMessage) is not
// text every store keeps.
func checkText(t *testing.T, v any) {
	t.Helper()
	var walk func(path string, v reflect.Value)
	walk = func(path string, v reflect.Value) {
		switch v.Kind() {
		case reflect.String:
			if p := hourglass.TextProblem(v.String()); p != "" {
				t.Fatalf("accepted %s %q: %s", path, v.String(), p)
			}
		case reflect.Pointer, reflect.Interface:
			if !v.IsNil() {
				walk(path, v.Elem())
			}
		case reflect.Struct:
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() {
					walk(path+"."+v.Type().Field(i).Name, v.Field(i))
				}
			}
		case reflect.Slice, reflect.Array:
			if v.Type() == reflect.TypeFor[json.RawMessage]() {
				if v.Len() > 0 {
					var x any
					if err := json.Unmarshal(v.Bytes(), &x); err != nil {
						t.Fatalf("accepted %s that is not JSON: %v", path, err)
					}
					walk(path, reflect.ValueOf(x))
				}
				return
			}
			if v.Type().Elem().Kind() == reflect.Uint8 {
				return // a hash
			}
			for i := range v.Len() {
				walk(fmt.Sprintf("%s[%d]", path, i), v.Index(i))
			}
		case reflect.Map:
			for it := v.MapRange(); it.Next(); {
				walk(path+" key", it.Key())
				walk(path+"."+fmt.Sprint(it.Key()), it.Value())
			}
		}
	}
	walk("", reflect.ValueOf(v))
}

// seeds are bodies of every request type, valid and not, and small cases of
// the shapes that cost the old scanner dearly.
func seeds() []string {
	wide := new(strings.Builder)
	wide.WriteString("{")
	for i := range 300 {
		fmt.Fprintf(wide, `"k%d":%d,`, i, i)
	}
	wide.WriteString(`"k":0}`)
	return []string{
		`{"user_id":"u1","items":[{"sku":"SKU-1","quantity":2}],"timeout_ms":60000}`,
		`{"payment_id":"pay-1"}`,
		`{"name":"Mug","category":"kitchen","available":10}`,
		`{"default_timeout_ms":60000,"categories":{"kitchen":120000,"Kitchen":1000}}`,
		`{"url":"https://example.com/hook","events":["order.closed","timer.fired"],"secret":"0123456789abcdef"}`,
		`{"delay_ms":1000,"payload":{"a":[1,{"b":"c"}],"d":null},"webhook_id":1}`,
		`{"fire_at":"2026-11-24T10:00:00.000Z","payload":{}}`,
		`{}`, ``, `{`, `[]`, `null`, `{"a":1,"a":2}`, `{"User_Id":"u"}`, `{"timeout_ms":-0}`,
		`{"user_id":"a\u0000b"}`, "{\"user_id\":\"a\xff\xfeb\"}", `{"user_id":"\ud800"}`, `{"user_id":"\ud83d\ude00"}`,
		`{"p\u0061yment_id":"x"}`, `{"payload":{"\u0000":1}}`,
		wide.String(),
		`{"payload":` + strings.Repeat(`{"a":`, 100) + strings.Repeat("}", 100) + "}",
		`{"payload":{"a":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + "}}",
	}
}

// FuzzCheckStrict: on any bytes and for every request type, the scanner
// answers nil or an invalid_argument error, and its work and allocations
// stay within a constant per byte.
func FuzzCheckStrict(f *testing.F) {
	for _, s := range seeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, typ := range requestTypes {
			var (
				st  strictjson.Stats
				err error
			)
			alloc := allocated(func() {
				st, err = strictjson.Scan(body, typ)
			})
			if err != nil {
				checkRefusal(t, invalidArgument(err))
			}
			if st.Work > maxScanWorkPerByte*len(body)+maxScanWorkConst {
				t.Fatalf("%v: %d steps for %d bytes (bound %d per byte + %d)", typ, st.Work, len(body), maxScanWorkPerByte, maxScanWorkConst)
			}
			if alloc > uint64(maxScanAllocPerByte*len(body)+maxScanAllocConst) {
				t.Fatalf("%v: allocated %d bytes for %d bytes (bound %d per byte + %d)", typ, alloc, len(body), maxScanAllocPerByte, maxScanAllocConst)
			}
			if st.Depth > MaxJSONDepth {
				t.Fatalf("%v: %d levels open", typ, st.Depth)
			}
		}
	})
}

// fuzzDecoder runs a decoder's fuzz target: refusals are invalid_argument,
// the cost is bounded, and accept checks what was accepted.
func fuzzDecoder[P any](f *testing.F, decode func([]byte) (P, error), accept func(*testing.T, P)) {
	for _, s := range seeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var (
			p   P
			err error
		)
		checkCost(t, body, func() { p, err = decode(body) })
		if err != nil {
			checkRefusal(t, err)
			return
		}
		checkText(t, p)
		accept(t, p)
	})
}

// FuzzDecodeCreateOrder: POST /v1/orders bodies.
func FuzzDecodeCreateOrder(f *testing.F) {
	fuzzDecoder(f, DecodeCreateOrder, func(t *testing.T, p hourglass.CreateOrderParams) {
		if err := hourglass.ValidateUserID(p.UserID); err != nil {
			t.Fatalf("accepted an invalid user id: %v", err)
		}
		if err := hourglass.ValidateItems(p.Items); err != nil {
			t.Fatalf("accepted invalid items: %v", err)
		}
		if p.Timeout != 0 {
			if err := hourglass.ValidateTimeout("timeout_ms", p.Timeout); err != nil {
				t.Fatalf("accepted an invalid timeout: %v", err)
			}
		}
		if len(p.RequestHash) != 32 {
			t.Fatalf("request hash of %d bytes", len(p.RequestHash))
		}
	})
}

// FuzzDecodePay: POST /v1/orders/{id}/pay bodies, as payOrder decodes them
// (the store then checks the payment id).
func FuzzDecodePay(f *testing.F) {
	fuzzDecoder(f, func(body []byte) (payRequest, error) {
		var req payRequest
		return req, decodeJSON(body, &req, false)
	}, func(*testing.T, payRequest) {})
}

// FuzzDecodePutProduct: PUT /v1/products/{sku} bodies.
func FuzzDecodePutProduct(f *testing.F) {
	fuzzDecoder(f, func(body []byte) (hourglass.Product, error) { return decodePutProduct("SKU-1", body) },
		func(t *testing.T, p hourglass.Product) {
			if err := hourglass.ValidateProduct(p); err != nil {
				t.Fatalf("accepted an invalid product: %v", err)
			}
		})
}

// FuzzDecodePutPolicy: PUT /v1/policies bodies.
func FuzzDecodePutPolicy(f *testing.F) {
	fuzzDecoder(f, decodePutPolicy, func(t *testing.T, p hourglass.Policy) {
		if err := p.Validate(); err != nil {
			t.Fatalf("accepted an invalid policy: %v", err)
		}
	})
}

// FuzzDecodeCreateWebhook: POST /v1/webhooks bodies.
func FuzzDecodeCreateWebhook(f *testing.F) {
	fuzzDecoder(f, decodeCreateWebhook, func(t *testing.T, p hourglass.WebhookParams) {
		if err := p.Validate(); err != nil {
			t.Fatalf("accepted an invalid webhook: %v", err)
		}
	})
}

// FuzzDecodeArmTimer: PUT /v1/timers/{key} bodies. An accepted payload is
// a JSON object within the limits whose every string and key is text (so
// PostgreSQL's jsonb takes it), and fire_at is within a year of now once
// the handler's check passed.
func FuzzDecodeArmTimer(f *testing.F) {
	now := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	fuzzDecoder(f, func(body []byte) (hourglass.ArmTimerParams, error) { return DecodeArmTimer("timer-1", body, now) },
		func(t *testing.T, p hourglass.ArmTimerParams) {
			if err := p.Validate(); err != nil {
				t.Fatalf("accepted invalid parameters: %v", err)
			}
			if p.Payload != nil {
				if err := checkStrict(p.Payload, nil); err != nil {
					t.Fatalf("accepted a payload the scanner refuses: %v", err)
				}
			}
			if p.FireAt.After(now.Add(hourglass.MaxTimerDelay)) {
				t.Fatalf("fire_at %v passed, more than a year after %v", p.FireAt, now)
			}
		})
}

// FuzzDecodeEmpty: the bodies of cancel, ship and complete (empty or {}).
func FuzzDecodeEmpty(f *testing.F) {
	fuzzDecoder(f, func(body []byte) (struct{}, error) { return struct{}{}, decodeEmpty(body) }, func(*testing.T, struct{}) {})
}

// FuzzCreateOrderFast: the one-pass decoder of the usual POST /v1/orders
// body answers exactly as the general path (strict scan, encoding/json,
// checks) does: the same parameters and hash, or the same refusal.
func FuzzCreateOrderFast(f *testing.F) {
	for _, s := range []string{
		`{"user_id":"user-12345","items":[{"sku":"MUG-1","quantity":2},{"sku":"TEE-9","quantity":1}],"timeout_ms":1800000}`,
		` { "items" : [ { "quantity" : 3 , "sku" : "A" } ] , "user_id" : "u" } `,
		`{"user_id":"ü-ser","items":[{"sku":"A","quantity":1}]}`,
		`{"user_id":"u","items":[{"sku":"A","quantity":1}],"timeout_ms":600000,"remind_before_ms":60000}`,
		`{"remind_before_ms":0,"user_id":"u","items":[{"sku":"A","quantity":1}]}`,
		`{"user_id":"u","items":[{"sku":"A","quantity":1}],"remind_before_ms":-1}`,
		`{"user_id":"u","items":[{"sku":"A","quantity":-0}]}`,
		`{"user_id":"u","items":[{"sku":"A","quantity":1e3}]}`,
		`{"user_id":"u","items":[{"sku":"A","quantity":1.0}]}`,
		`{"user_id":"u","items":[{"sku":"A","quantity":01}]}`,
		`{"user_id":"u","items":[{"sku":"A","quantity":999999999999999999999}]}`,
		`{"user_id":"u","items":[{"sku":"A","quantity":1}],"timeout_ms":-5}`,
		`{"user_id":"u","user_id":"v","items":[{"sku":"A","quantity":1}]}`,
		`{"user_id":"u","items":[{"sku":"A","sku":"B","quantity":1}]}`,
		`{"user_id":"u\u0041","items":[{"sku":"A","quantity":1}]}`,
		`{"user_id":null,"items":[{"sku":"A","quantity":1}]}`,
		`{"USER_ID":"u","items":[{"sku":"A","quantity":1}]}`,
		`{"user_id":"u","items":[]}`,
		`{"user_id":"u","items":[{"sku":"A","quantity":1},{"sku":"A","quantity":1}]}`,
		`{"user_id":"","items":[{"sku":"A","quantity":1}]}`,
		`{"user_id":"u","items":[{"sku":"A","quantity":1}]} x`,
		`{"user_id":"u","items":[{"sku":"A","quantity":1}],}`,
		"{\"user_id\":\"\xff\",\"items\":[{\"sku\":\"A\",\"quantity\":1}]}",
		`{}`, `[]`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, gotErr := DecodeCreateOrder(body)
		want, wantErr := decodeCreateOrderGeneral(body, true)
		if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
			t.Fatalf("%q: error %v; the general path's %v", body, gotErr, wantErr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: %+v; the general path's %+v", body, got, want)
		}
		// Without an idempotency key the hash is skipped, nothing else.
		unhashed, err := decodeCreateOrder(body, false)
		if (err == nil) != (gotErr == nil) || (err != nil && err.Error() != gotErr.Error()) {
			t.Fatalf("%q: unhashed error %v; hashed %v", body, err, gotErr)
		}
		got.RequestHash = nil
		if !reflect.DeepEqual(unhashed, got) {
			t.Fatalf("%q: unhashed %+v; hashed %+v", body, unhashed, got)
		}
	})
}

// TestCreateOrderFastTakesTheUsualBody: the body clients send goes the fast
// way (so the benchmark measures it), and its hash is the one fmt wrote
// before the fast path (a stored idempotency key still matches).
func TestCreateOrderFastTakesTheUsualBody(t *testing.T) {
	body := []byte(`{"user_id":"user 1 ü","items":[{"sku":"MUG-1","quantity":2},{"sku":"TEE-9","quantity":1}],"timeout_ms":1800000}`)
	if _, ok := createOrderFast(body); !ok {
		t.Fatalf("the usual body does not take the fast path")
	}
	p, err := DecodeCreateOrder(body)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%q\x00%d\x00", "user 1 ü", int64(1800000))
	fmt.Fprintf(h, "%s\x00%d\x00", "MUG-1", int64(2))
	fmt.Fprintf(h, "%s\x00%d\x00", "TEE-9", int64(1))
	if want := h.Sum(nil); !bytes.Equal(p.RequestHash, want) {
		t.Errorf("request hash %x, want %x (fmt's)", p.RequestHash, want)
	}
}

// FuzzAppendOrderJSON: the order encoder without reflection writes the bytes
// encoding/json writes of orderJSON, whatever the strings hold (quotes,
// control characters, invalid UTF-8, U+2028) and whatever the times
// (zero or not, any year).
func FuzzAppendOrderJSON(f *testing.F) {
	f.Add(int64(42), "u1", "MUG-1", int64(2), int64(1796565600000), int64(1796567400000), "timeout", "", true)
	f.Add(int64(-1), "a\"b\\c\n\t\x00\x1f<>&", "\u2028\u2029\xff", int64(-7), int64(-62135596800000), int64(253402300800000), "é", "pay_\x7f", false)
	f.Fuzz(func(t *testing.T, id int64, user, sku string, qty, createdMs, deadlineMs int64, reason, payment string, items bool) {
		o := hourglass.Order{ID: id, UserID: user, Status: hourglass.State(reason), CreatedAt: time.UnixMilli(createdMs),
			Deadline: time.UnixMilli(deadlineMs), Items: []hourglass.Item{}}
		if o.CreatedAt.IsZero() || o.Deadline.IsZero() {
			t.Skip("orderJSON needs both times")
		}
		if items {
			o.Items = []hourglass.Item{{SKU: sku, Quantity: qty}, {SKU: user, Quantity: id}}
			o.ClosedAt, o.CloseReason = time.UnixMilli(deadlineMs+qty), reason
		}
		if payment != "" {
			o.PaymentID, o.PaidAt = payment, time.UnixMilli(createdMs+id)
		}
		want, err := marshalJSON(orderJSON(o))
		if err != nil {
			t.Fatal(err)
		}
		if got := appendOrder(nil, &o); string(got) != string(want) {
			t.Fatalf("appendOrder:\n%s\nencoding/json:\n%s", got, want)
		}
		if got, err := encodeValue(orderAnswer(o)); err != nil || string(got) != string(want) {
			t.Fatalf("encodeValue: %v\n%s\nencoding/json:\n%s", err, got, want)
		}
	})
}

func BenchmarkEncodeOrder(b *testing.B) {
	now := time.Date(2026, 12, 6, 14, 0, 0, 0, time.UTC)
	order := hourglass.Order{ID: 123456, UserID: "user-12345", Status: hourglass.StatePendingPayment, CreatedAt: now, Deadline: now.Add(30 * time.Minute),
		Items: []hourglass.Item{{SKU: "MUG-1", Quantity: 2}, {SKU: "TEE-9", Quantity: 1}, {SKU: "CAP-3", Quantity: 5}}}
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := marshalJSON(orderJSON(order)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := encodeValue(orderAnswer(order)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
