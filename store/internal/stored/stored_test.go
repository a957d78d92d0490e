package stored

import (
	"fmt"
	"testing"

	"github.com/hourglass/hourglass"
)

func TestParseEncodedItems(t *testing.T) {
	t.Parallel()
	for _, items := range [][]hourglass.Item{
		{{SKU: "A", Quantity: 1}},
		{{SKU: "SKU-1.x_y", Quantity: 3}, {SKU: "B", Quantity: 12345678901}},
	} {
		got, ok := parseEncodedItems(EncodeItems(items))
		if !ok || fmt.Sprint(got) != fmt.Sprint(items) {
			t.Errorf("parseEncodedItems(%s) = %v, %v; want %v", EncodeItems(items), got, ok, items)
		}
	}
	for _, raw := range []string{``, `[`, `[{"sku":"A","quantity":1}`, `[{"quantity":1,"sku":"A"}]`, `[{"sku":"A","quantity":x}]`, `[{"sku": "A","quantity":1}]`, `[{"sku":"A","quantity":1},]`} {
		if _, ok := parseEncodedItems(raw); ok {
			t.Errorf("parseEncodedItems(%q) accepted it", raw)
		}
	}
}
