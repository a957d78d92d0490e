package plan

import (
	"errors"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

var now = time.UnixMilli(1_800_000_000_000).UTC()

func setup(t *testing.T) *Admission {
	t.Helper()
	ordered := hourglass.Order{ID: 7, Status: hourglass.StatePendingPayment}
	return &Admission{
		Now:   now,
		Stock: Stock{"A": {Category: "fast", Available: 3}, "B": {Available: 1}},
		Keys:  map[string]StoredKey{"stored": {Hash: []byte("h"), OrderID: 7, Order: &ordered}},
		Policy: func() (hourglass.Policy, error) {
			return hourglass.Policy{DefaultTimeout: time.Minute, Categories: map[string]time.Duration{"fast": time.Second}}, nil
		},
	}
}

func create(key, hash string, timeout time.Duration, items ...hourglass.Item) hourglass.CreateOrderParams {
	return hourglass.CreateOrderParams{UserID: "u", IdempotencyKey: key, RequestHash: []byte(hash), Timeout: timeout, Items: items}
}

func TestAdmission(t *testing.T) {
	t.Parallel()
	a1 := hourglass.Item{SKU: "A", Quantity: 1}
	for _, tt := range []struct {
		name     string
		creates  []hourglass.CreateOrderParams
		want     []string // per create: "new", "replay", "same:N" or an error code
		deadline time.Duration
		left     int64 // A's available after the batch
	}{
		{"admitted with the category's timeout", []hourglass.CreateOrderParams{create("", "", 0, a1)}, []string{"new"}, time.Second, 2},
		{"explicit timeout", []hourglass.CreateOrderParams{create("", "", time.Hour, a1)}, []string{"new"}, time.Hour, 2},
		{"stored key replayed", []hourglass.CreateOrderParams{create("stored", "h", 0, a1)}, []string{"replay"}, 0, 3},
		{"stored key reused", []hourglass.CreateOrderParams{create("stored", "x", 0, a1)}, []string{string(hourglass.CodeIdempotencyKeyReused)}, 0, 3},
		{"in-batch repeat", []hourglass.CreateOrderParams{create("k", "h", 0, a1), create("k", "h", 0, a1), create("k", "x", 0, a1)},
			[]string{"new", "same:0", string(hourglass.CodeIdempotencyKeyReused)}, time.Second, 2},
		{"unknown SKU", []hourglass.CreateOrderParams{create("", "", 0, hourglass.Item{SKU: "Z", Quantity: 1})}, []string{string(hourglass.CodeNotFound)}, 0, 3},
		{"stock runs out in the batch", []hourglass.CreateOrderParams{
			create("", "", 0, hourglass.Item{SKU: "A", Quantity: 2}), create("", "", 0, hourglass.Item{SKU: "A", Quantity: 2}), create("", "", 0, a1)},
			[]string{"new", string(hourglass.CodeInsufficientStock), "new"}, time.Second, 0},
		{"an order reserves all or nothing", []hourglass.CreateOrderParams{create("", "", 0, a1, hourglass.Item{SKU: "B", Quantity: 2})},
			[]string{string(hourglass.CodeInsufficientStock)}, 0, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := setup(t)
			for i, p := range tt.creates {
				d, err := a.Create(p)
				if err != nil {
					t.Fatal(err)
				}
				var got string
				switch {
				case d.Err != nil:
					got = string(hourglass.ErrorCode(d.Err))
				case d.Replay != nil:
					got = "replay"
				case d.SameAs >= 0:
					got = "same:" + string(rune('0'+d.SameAs))
				default:
					got = "new"
					if !d.Order.Deadline.Equal(now.Add(tt.deadline)) || d.Order.Status != hourglass.StatePendingPayment {
						t.Errorf("create %d: %+v, want pending due in %s", i, d.Order, tt.deadline)
					}
				}
				if got != tt.want[i] {
					t.Errorf("create %d: %s, want %s", i, got, tt.want[i])
				}
			}
			if p := a.Stock["A"]; p.Available != tt.left || p.Reserved != 3-tt.left || p.Delta != [3]int64{tt.left - 3, 3 - tt.left, 0} {
				t.Errorf("A after the batch: %+v, want %d available", p, tt.left)
			}
		})
	}
}

func TestPolicyErrorFailsTheBatch(t *testing.T) {
	t.Parallel()
	a := setup(t)
	broken := errors.New("bad policy")
	a.Policy = func() (hourglass.Policy, error) { return hourglass.Policy{}, broken }
	if _, err := a.Create(create("", "", 0, hourglass.Item{SKU: "A", Quantity: 1})); !errors.Is(err, broken) {
		t.Fatalf("got %v, want the policy's error", err)
	}
}

func TestTransitions(t *testing.T) {
	t.Parallel()
	pending := &hourglass.Order{ID: 1, Status: hourglass.StatePendingPayment, Deadline: now.Add(time.Second)}
	due := &hourglass.Order{ID: 2, Status: hourglass.StatePendingPayment, Deadline: now}
	paid := &hourglass.Order{ID: 3, Status: hourglass.StatePaid, PaidAt: now, PaymentID: "p"}
	for _, tt := range []struct {
		name string
		cur  *hourglass.Order
		pay  string // "pay", "repeat" or a code
	}{
		{"pending pays", pending, "pay"},
		{"due does not", due, string(hourglass.CodeOrderNotPayable)},
		{"same payment repeats", paid, "repeat"},
		{"none", nil, string(hourglass.CodeNotFound)},
	} {
		pay, repeat, err := Pay(tt.cur, 1, "p", now)
		got := string(hourglass.ErrorCode(err))
		if pay {
			got = "pay"
		} else if repeat {
			got = "repeat"
		}
		if got != tt.pay {
			t.Errorf("%s: pay %s, want %s", tt.name, got, tt.pay)
		}
	}
	if _, _, err := Pay(paid, 3, "other", now); hourglass.ErrorCode(err) != hourglass.CodeOrderNotPayable {
		t.Errorf("another payment of a paid order: %v", err)
	}
	from, _, err := Action(hourglass.ActionCancel)
	if err != nil {
		t.Fatal(err)
	}
	if err := Transition(pending, 1, hourglass.ActionCancel, from, now); err != nil {
		t.Errorf("cancel of a pending order: %v", err)
	}
	if err := Transition(due, 2, hourglass.ActionCancel, from, now); hourglass.ErrorCode(err) != hourglass.CodeInvalidTransition {
		t.Errorf("cancel at the deadline: %v", err)
	}
	if _, _, err := Action("explode"); hourglass.ErrorCode(err) != hourglass.CodeInvalidArgument {
		t.Errorf("unknown action: %v", err)
	}
	if Closes(pending, now) || !Closes(due, now) || Closes(paid, now) || Closes(nil, now) {
		t.Error("Closes: only a pending order at or past its deadline closes")
	}
}

// FuzzAdmission: whatever the creates, the planner never oversells, stock
// is conserved, and each create gets exactly one answer.
func FuzzAdmission(f *testing.F) {
	f.Add([]byte{1, 2, 3, 0, 1, 5}, int64(4))
	f.Add([]byte{0, 0, 0, 0}, int64(0))
	f.Fuzz(func(t *testing.T, ops []byte, available int64) {
		if available < 0 || available > 1<<40 || len(ops) > 4096 {
			return
		}
		skus := []string{"A", "B", "C"}
		a := &Admission{Now: now, Stock: Stock{}, Keys: map[string]StoredKey{"k0": {Hash: []byte{0}, OrderID: 1}},
			Policy: func() (hourglass.Policy, error) { return hourglass.Policy{DefaultTimeout: time.Minute}, nil }}
		for _, sku := range skus[:2] { // C is unknown
			a.Stock[sku] = &Product{Available: available}
		}
		var reserved int64
		for i := 0; i+1 < len(ops); i += 2 {
			b, q := ops[i], int64(ops[i+1]%8)+1
			p := create("", "", 0, hourglass.Item{SKU: skus[int(b)%3], Quantity: q})
			if b&8 != 0 {
				p.IdempotencyKey, p.RequestHash = "k"+string(rune('0'+(b>>4)%3)), []byte{b >> 6}
			}
			d, err := a.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			answers := 0
			for _, set := range []bool{d.Err != nil, d.Replay != nil, d.SameAs >= 0, d.Order != nil} {
				if set {
					answers++
				}
			}
			if answers != 1 {
				t.Fatalf("create %d: %+v: %d answers", i/2, d, answers)
			}
			if d.Order != nil {
				reserved += q
			}
		}
		var total, res int64
		for _, p := range a.Stock {
			if p.Available < 0 {
				t.Fatalf("oversold: %+v", p)
			}
			total += p.Available + p.Reserved
			res += p.Reserved
		}
		if total != 2*available || res != reserved {
			t.Fatalf("stock %d (reserved %d), want %d (reserved %d)", total, res, 2*available, reserved)
		}
	})
}
