package api

import (
	"errors"
	"testing"

	"github.com/hourglass/hourglass"
)

// FuzzDecodeCreateOrder feeds arbitrary bodies to the create-order decoder:
// it must never panic, must refuse with an invalid_argument *hourglass.Error,
// and whatever it accepts must pass the domain's own validation. The seed
// corpus is in testdata/fuzz/FuzzDecodeCreateOrder.
func FuzzDecodeCreateOrder(f *testing.F) {
	for _, seed := range []string{
		`{"user_id":"u1","items":[{"sku":"SKU-1","quantity":2}]}`,
		`{"user_id":"u1","items":[{"sku":"A","quantity":1},{"sku":"B","quantity":10000}],"timeout_ms":1000}`,
		`{"user_id":"u1","items":[{"sku":"A","quantity":1}],"timeout_ms":0}`,
		`{"user_id":"u1","items":[]}`,
		`{"user_id":"u1","items":[null]}`,
		`{"user_id":null,"items":[{"sku":"A","quantity":1}]}`,
		`{"user_id":"u1","items":[{"sku":"A","quantity":1.5}]}`,
		`{"user_id":"u1","items":[{"sku":"A","quantity":1}]} {}`,
		`[]`, ``, `{`, `null`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := DecodeCreateOrder(body)
		if err != nil {
			var he *hourglass.Error
			if !errors.As(err, &he) || he.Code != hourglass.CodeInvalidArgument || he.Message == "" {
				t.Fatalf("error %#v is not an invalid_argument *hourglass.Error with a message", err)
			}
			return
		}
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
