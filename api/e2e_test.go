package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/testenv"
)

// illegalActions lists, for each status, the actions the state machine
// refuses with invalid_transition.
var illegalActions = map[string][]string{
	"pending_payment": {"ship", "complete"},
	"paid":            {"cancel", "complete"},
	"shipped":         {"cancel", "ship"},
	"completed":       {"cancel", "ship", "complete"},
	"cancelled":       {"cancel", "ship", "complete"},
	"closed":          {"cancel", "ship", "complete"},
}

// checkIllegalActions tries every action the order's status refuses and
// checks each answers 409 invalid_transition and changes nothing.
func checkIllegalActions(t *testing.T, s *testServer, o api.OrderJSON) {
	t.Helper()
	actions, ok := illegalActions[o.Status]
	if !ok {
		t.Fatalf("no illegal actions listed for status %q", o.Status)
	}
	for _, a := range actions {
		status, _, raw := s.call(t, http.MethodPost, fmt.Sprintf("/v1/orders/%d/%s", o.ID, a), nil, nil)
		checkError(t, fmt.Sprintf("%s a %s order", a, o.Status), status, raw, http.StatusConflict, "invalid_transition")
	}
	if got := s.order(t, o.ID); !reflect.DeepEqual(got, o) {
		t.Errorf("refused transitions changed the order:\n got %+v\nwant %+v", got, o)
	}
}

func TestHappyPath(t *testing.T) { onEveryMechanism(t, testHappyPath) }

func testHappyPath(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{})
	s.putProduct(t, "tea-1", "grocery", 10)
	s.putProduct(t, "cup-1", "kitchen", 5)

	before := time.Now()
	status, _, raw := s.call(t, http.MethodPost, "/v1/orders", nil,
		[]byte(`{"user_id":"u-1","items":[{"sku":"tea-1","quantity":2},{"sku":"cup-1","quantity":1}],"timeout_ms":60000}`))
	after := time.Now()
	if status != http.StatusCreated {
		t.Fatalf("create: status %d, body %s", status, raw)
	}
	created, fields := checkOrderJSON(t, raw)
	checkNull(t, "created order", fields, "paid_at", "closed_at", "close_reason", "payment_id")
	wantItems := []api.ItemJSON{{SKU: "tea-1", Quantity: 2}, {SKU: "cup-1", Quantity: 1}}
	if created.ID <= 0 || created.UserID != "u-1" || created.Status != "pending_payment" || !slices.Equal(created.Items, wantItems) {
		t.Errorf("created order = %+v", created)
	}
	createdAt, deadline := apiTimeOf(t, created.CreatedAt), apiTimeOf(t, created.Deadline)
	if d := deadline.Sub(createdAt); d != 60*time.Second {
		t.Errorf("deadline - created_at = %v, want 60s", d)
	}
	// Stored times are whole milliseconds, so allow created_at to be up to
	// 1ms before the request was sent.
	if createdAt.Before(before.Add(-time.Millisecond)) || createdAt.After(after) {
		t.Errorf("created_at %v not within the request [%v, %v]", createdAt, before, after)
	}
	s.wantStock(t, "after create", "tea-1", stock{8, 2, 0})
	s.wantStock(t, "after create", "cup-1", stock{4, 1, 0})
	if got := s.order(t, created.ID); !reflect.DeepEqual(got, created) {
		t.Errorf("GET order = %+v, want the created order %+v", got, created)
	}
	checkIllegalActions(t, s, created)
	s.wantStock(t, "after refused transitions", "tea-1", stock{8, 2, 0})

	pay := func(paymentID string) (int, []byte) {
		status, _, raw := s.call(t, http.MethodPost, fmt.Sprintf("/v1/orders/%d/pay", created.ID), nil,
			[]byte(`{"payment_id":"`+paymentID+`"}`))
		return status, raw
	}
	status, raw = pay("pay-1")
	if status != http.StatusOK {
		t.Fatalf("pay: status %d, body %s", status, raw)
	}
	paid, fields := checkOrderJSON(t, raw)
	checkNull(t, "paid order", fields, "closed_at", "close_reason")
	if paid.Status != "paid" || *paid.PaymentID != "pay-1" || paid.ID != created.ID || paid.Deadline != created.Deadline {
		t.Errorf("paid order = %+v", paid)
	}
	if paidAt := apiTimeOf(t, *paid.PaidAt); paidAt.Before(createdAt) || !paidAt.Before(deadline) {
		t.Errorf("paid_at %v not in [created_at %v, deadline %v)", paidAt, createdAt, deadline)
	}
	s.wantStock(t, "after pay", "tea-1", stock{8, 0, 2})
	s.wantStock(t, "after pay", "cup-1", stock{4, 0, 1})

	status, raw = pay("pay-1")
	if status != http.StatusOK {
		t.Errorf("pay again with the same payment_id: status %d, body %s", status, raw)
	} else if again, _ := checkOrderJSON(t, raw); !reflect.DeepEqual(again, paid) {
		t.Errorf("pay again with the same payment_id = %+v, want the paid order %+v", again, paid)
	}
	status, raw = pay("pay-2")
	checkError(t, "pay with another payment_id", status, raw, http.StatusConflict, "order_not_payable")
	s.wantStock(t, "after repeated pays", "tea-1", stock{8, 0, 2})
	checkIllegalActions(t, s, paid)

	next := paid
	for _, step := range []struct{ action, status string }{{"ship", "shipped"}, {"complete", "completed"}} {
		status, _, raw := s.call(t, http.MethodPost, fmt.Sprintf("/v1/orders/%d/%s", created.ID, step.action), nil, nil)
		if status != http.StatusOK {
			t.Fatalf("%s: status %d, body %s", step.action, status, raw)
		}
		o, fields := checkOrderJSON(t, raw)
		checkNull(t, step.action, fields, "closed_at", "close_reason")
		want := next
		want.Status = step.status
		if !reflect.DeepEqual(o, want) {
			t.Errorf("%s = %+v, want %+v", step.action, o, want)
		}
		checkIllegalActions(t, s, o)
		status, raw = pay("pay-2")
		checkError(t, "pay a "+step.status+" order", status, raw, http.StatusConflict, "order_not_payable")
		next = o
	}
	s.wantStock(t, "after complete", "tea-1", stock{8, 0, 2})
	s.wantStock(t, "after complete", "cup-1", stock{4, 0, 1})
}

func TestCloseOnTimeout(t *testing.T) { onEveryMechanism(t, testCloseOnTimeout) }

func testCloseOnTimeout(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{})
	s.putProduct(t, "gift-1", "", 3)
	created := s.createOrder(t, `{"user_id":"u-1","items":[{"sku":"gift-1","quantity":2}],"timeout_ms":1000}`)
	deadline := apiTimeOf(t, created.Deadline)
	if d := deadline.Sub(apiTimeOf(t, created.CreatedAt)); d != time.Second {
		t.Errorf("deadline - created_at = %v, want 1s", d)
	}
	s.wantStock(t, "after create", "gift-1", stock{1, 2, 0})

	var closed api.OrderJSON
	testenv.Eventually(t, 10*time.Second, "order closed with closed_at set", func() bool {
		closed = s.order(t, created.ID)
		if closed.Status != "pending_payment" && closed.Status != "closed" {
			t.Fatalf("unpaid order has status %q", closed.Status)
		}
		return closed.ClosedAt != nil
	})
	_, _, raw := s.call(t, http.MethodGet, fmt.Sprintf("/v1/orders/%d", created.ID), nil, nil)
	_, fields := checkOrderJSON(t, raw)
	checkNull(t, "closed order", fields, "paid_at", "payment_id")
	if closed.Status != "closed" || closed.CloseReason == nil || *closed.CloseReason != "timeout" {
		t.Errorf("closed order = %+v, want status closed, close_reason timeout", closed)
	}
	lag := apiTimeOf(t, *closed.ClosedAt).Sub(deadline)
	t.Logf("closed %v after the deadline", lag)
	if lag < 0 || lag >= time.Second {
		t.Errorf("closed_at - deadline = %v, want in [0, 1s)", lag)
	}
	s.wantStock(t, "after close", "gift-1", stock{3, 0, 0})

	status, _, raw := s.call(t, http.MethodPost, fmt.Sprintf("/v1/orders/%d/pay", created.ID), nil, []byte(`{"payment_id":"late"}`))
	checkError(t, "pay a closed order", status, raw, http.StatusConflict, "order_not_payable")
	checkIllegalActions(t, s, closed)
	s.wantStock(t, "after refused pay and cancel", "gift-1", stock{3, 0, 0})
}

func TestCancelReleasesStock(t *testing.T) { onEveryMechanism(t, testCancelReleasesStock) }

func testCancelReleasesStock(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{})
	s.putProduct(t, "mug-1", "", 5)
	created := s.createOrder(t, `{"user_id":"u-1","items":[{"sku":"mug-1","quantity":3}],"timeout_ms":1000}`)
	s.wantStock(t, "after create", "mug-1", stock{2, 3, 0})

	status, _, raw := s.call(t, http.MethodPost, fmt.Sprintf("/v1/orders/%d/cancel", created.ID), nil, nil)
	if status != http.StatusOK {
		t.Fatalf("cancel: status %d, body %s", status, raw)
	}
	cancelled, fields := checkOrderJSON(t, raw)
	checkNull(t, "cancelled order", fields, "paid_at", "payment_id", "close_reason", "closed_at")
	if cancelled.Status != "cancelled" {
		t.Errorf("cancelled order status = %q", cancelled.Status)
	}
	s.wantStock(t, "after cancel", "mug-1", stock{5, 0, 0})
	status, _, raw = s.call(t, http.MethodPost, fmt.Sprintf("/v1/orders/%d/pay", created.ID), nil, []byte(`{"payment_id":"p"}`))
	checkError(t, "pay a cancelled order", status, raw, http.StatusConflict, "order_not_payable")
	checkIllegalActions(t, s, cancelled)

	// Past the deadline, neither the wheel nor the sweeper (grace 500ms,
	// every 200ms) may touch a cancelled order or release its stock again.
	// Nothing signals "the closer chose to do nothing", so wait it out.
	testenv.Phase(t, time.Until(apiTimeOf(t, created.Deadline).Add(time.Second)), "past the cancelled order's deadline, the sweeper's grace and its interval")
	if got := s.order(t, created.ID); !reflect.DeepEqual(got, cancelled) {
		t.Errorf("cancelled order after its deadline = %+v, want %+v", got, cancelled)
	}
	s.wantStock(t, "after the deadline", "mug-1", stock{5, 0, 0})
}

func TestIdempotentCreate(t *testing.T) { onEveryMechanism(t, testIdempotentCreate) }

func testIdempotentCreate(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{})
	s.putProduct(t, "pen-1", "", 10)
	post := func(key, body string) (int, []byte) {
		h := http.Header{}
		if key != "" {
			h.Set("Idempotency-Key", key)
		}
		status, _, raw := s.call(t, http.MethodPost, "/v1/orders", h, []byte(body))
		return status, raw
	}
	body := `{"user_id":"u-1","items":[{"sku":"pen-1","quantity":2}],"timeout_ms":60000}`
	status, raw := post("key-1", body)
	if status != http.StatusCreated {
		t.Fatalf("first create: status %d, body %s", status, raw)
	}
	first, _ := checkOrderJSON(t, raw)

	for _, tc := range []struct{ name, body string }{
		{"same bytes", body},
		{"same meaning, other bytes", "{ \"timeout_ms\": 60000,\n \"items\": [{\"quantity\": 2, \"sku\": \"pen-1\"}], \"user_id\": \"u-1\" }"},
	} {
		status, raw := post("key-1", tc.body)
		if status != http.StatusOK {
			t.Errorf("repeat (%s): status %d, want 200; body %s", tc.name, status, raw)
			continue
		}
		if again, _ := checkOrderJSON(t, raw); !reflect.DeepEqual(again, first) {
			t.Errorf("repeat (%s) = %+v, want the first order %+v", tc.name, again, first)
		}
	}
	s.wantStock(t, "after repeats", "pen-1", stock{8, 2, 0})

	for _, tc := range []struct{ name, body string }{
		{"other quantity", `{"user_id":"u-1","items":[{"sku":"pen-1","quantity":3}],"timeout_ms":60000}`},
		{"other user", `{"user_id":"u-2","items":[{"sku":"pen-1","quantity":2}],"timeout_ms":60000}`},
		{"other timeout", `{"user_id":"u-1","items":[{"sku":"pen-1","quantity":2}],"timeout_ms":60001}`},
	} {
		status, raw := post("key-1", tc.body)
		checkError(t, "key reused with "+tc.name, status, raw, http.StatusConflict, "idempotency_key_reused")
	}
	s.wantStock(t, "after reused keys", "pen-1", stock{8, 2, 0})
	if n := len(s.allOrders(t, "", 100)); n != 1 {
		t.Errorf("%d orders after reused keys, want 1", n)
	}

	status, raw = post("key-2", body)
	if status != http.StatusCreated {
		t.Fatalf("create with another key: status %d, body %s", status, raw)
	}
	if o, _ := checkOrderJSON(t, raw); o.ID == first.ID {
		t.Errorf("another key returned the first order %d", first.ID)
	}
	s.wantStock(t, "after another key", "pen-1", stock{6, 4, 0})

	// A retry after the first order was cancelled returns that order as it
	// is now; it must not reserve stock again.
	if _, err := s.Client.Transition(t.Context(), first.ID, "cancel"); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	status, raw = post("key-1", body)
	if status != http.StatusOK {
		t.Errorf("repeat after cancel: status %d, want 200; body %s", status, raw)
	} else if o, _ := checkOrderJSON(t, raw); o.ID != first.ID || o.Status != "cancelled" {
		t.Errorf("repeat after cancel = %+v, want order %d cancelled", o, first.ID)
	}
	s.wantStock(t, "after repeat of a cancelled create", "pen-1", stock{8, 2, 0})
	if n := len(s.allOrders(t, "", 100)); n != 2 {
		t.Errorf("%d orders, want 2", n)
	}
}

func TestTimeoutPolicy(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{})
	ctx := t.Context()
	p, err := s.Client.Policy(ctx)
	if err != nil {
		t.Fatalf("get policy: %v", err)
	}
	if want := (api.PolicyJSON{DefaultTimeoutMs: 1800000, Categories: map[string]int64{}, RemindBeforeCategories: map[string]int64{}}); !reflect.DeepEqual(p, want) {
		t.Errorf("initial policy = %+v, want %+v", p, want)
	}
	want := api.PolicyJSON{DefaultTimeoutMs: 600000, Categories: map[string]int64{"virtual": 2000, "physical": 5000},
		RemindBeforeMs: 60000, RemindBeforeCategories: map[string]int64{"virtual": 0, "physical": 3000}}
	if _, err := s.Client.PutPolicy(ctx, want); err != nil {
		t.Fatalf("put policy: %v", err)
	}
	if p, err := s.Client.Policy(ctx); err != nil || !reflect.DeepEqual(p, want) {
		t.Errorf("policy after put = %+v, %v; want %+v", p, err, want)
	}
	s.putProduct(t, "ebook-1", "virtual", 1000)
	s.putProduct(t, "chair-1", "physical", 1000)
	s.putProduct(t, "misc-1", "uncategorised", 1000)

	for _, tc := range []struct {
		name        string
		items       string
		timeoutMs   string // "" for none
		wantTimeout time.Duration
	}{
		{"category", `[{"sku":"ebook-1","quantity":1}]`, "", 2 * time.Second},
		{"other category", `[{"sku":"chair-1","quantity":1}]`, "", 5 * time.Second},
		{"smallest category wins", `[{"sku":"chair-1","quantity":1},{"sku":"ebook-1","quantity":1}]`, "", 2 * time.Second},
		{"unlisted category ignored", `[{"sku":"misc-1","quantity":1},{"sku":"chair-1","quantity":1}]`, "", 5 * time.Second},
		{"default", `[{"sku":"misc-1","quantity":1}]`, "", 10 * time.Minute},
		{"explicit timeout above the category", `[{"sku":"ebook-1","quantity":1}]`, "60000", time.Minute},
		{"explicit timeout below the category", `[{"sku":"chair-1","quantity":1}]`, "1000", time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			body := `{"user_id":"u-1","items":` + tc.items
			if tc.timeoutMs != "" {
				body += `,"timeout_ms":` + tc.timeoutMs
			}
			o := s.createOrder(t, body+"}")
			if got := apiTimeOf(t, o.Deadline).Sub(apiTimeOf(t, o.CreatedAt)); got != tc.wantTimeout {
				t.Errorf("deadline - created_at = %v, want %v", got, tc.wantTimeout)
			}
		})
	}
}

func TestListOrders(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{})
	ctx := t.Context()
	s.putProduct(t, "book-1", "", 100)
	var ids []int64
	for i := range 7 {
		o := s.createOrder(t, fmt.Sprintf(`{"user_id":"u-%d","items":[{"sku":"book-1","quantity":1}],"timeout_ms":600000}`, i))
		ids = append(ids, o.ID)
	}
	shortLived := s.createOrder(t, `{"user_id":"u-short","items":[{"sku":"book-1","quantity":1}],"timeout_ms":1000}`)
	ids = append(ids, shortLived.ID)
	for _, id := range []int64{ids[1], ids[4]} {
		if _, err := s.Client.Pay(ctx, id, fmt.Sprintf("pay-%d", id)); err != nil {
			t.Fatalf("pay %d: %v", id, err)
		}
	}
	if _, err := s.Client.Transition(ctx, ids[2], "cancel"); err != nil {
		t.Fatalf("cancel %d: %v", ids[2], err)
	}
	// An unpaid order reads as closed from its deadline on.
	testenv.Eventually(t, 10*time.Second, "short-lived order reads as closed", func() bool {
		return s.order(t, shortLived.ID).Status == "closed"
	})

	t.Run("pages", func(t *testing.T) {
		t.Parallel()
		var got []int64
		after := ""
		for page := 0; ; page++ {
			path := "/v1/orders?limit=3" + after
			status, _, raw := s.call(t, http.MethodGet, path, nil, nil)
			if status != http.StatusOK {
				t.Fatalf("GET %s: status %d, body %s", path, status, raw)
			}
			var fields map[string]json.RawMessage
			if err := json.Unmarshal(raw, &fields); err != nil || len(fields) != 2 || fields["orders"] == nil || fields["next"] == nil {
				t.Fatalf("GET %s: body %s, want exactly orders and next", path, raw)
			}
			var l api.OrderListJSON
			if err := json.Unmarshal(raw, &l); err != nil {
				t.Fatal(err)
			}
			for _, o := range l.Orders {
				got = append(got, o.ID)
			}
			last := page == 2
			switch {
			case last && string(fields["next"]) != "null":
				t.Errorf("last page: next = %s, want null", fields["next"])
			case !last && (l.Next == nil || len(l.Orders) != 3 || *l.Next != l.Orders[2].ID):
				t.Errorf("page %d: %d orders, next %s; want 3 orders and next = the last id", page, len(l.Orders), fields["next"])
			}
			if l.Next == nil || page > 2 {
				break
			}
			after = fmt.Sprintf("&after=%d", *l.Next)
		}
		if !slices.Equal(got, ids) {
			t.Errorf("paged ids = %v, want %v", got, ids)
		}
	})

	t.Run("past the end", func(t *testing.T) {
		t.Parallel()
		status, _, raw := s.call(t, http.MethodGet, fmt.Sprintf("/v1/orders?after=%d", ids[len(ids)-1]), nil, nil)
		if status != http.StatusOK || strings.TrimSpace(string(raw)) != `{"orders":[],"next":null}` {
			t.Errorf("past the end: status %d, body %s; want 200 {\"orders\":[],\"next\":null}", status, raw)
		}
	})

	for _, tc := range []struct {
		status string
		want   []int64
	}{
		{"", ids},
		{"pending_payment", []int64{ids[0], ids[3], ids[5], ids[6]}},
		{"paid", []int64{ids[1], ids[4]}},
		{"cancelled", []int64{ids[2]}},
		{"closed", []int64{shortLived.ID}},
		{"shipped", nil},
		{"completed", nil},
	} {
		t.Run("status="+tc.status, func(t *testing.T) {
			t.Parallel()
			for _, limit := range []int{1, 2, 1000} {
				orders := s.allOrders(t, tc.status, limit)
				var got []int64
				for _, o := range orders {
					got = append(got, o.ID)
					if tc.status != "" && o.Status != tc.status {
						t.Errorf("status=%s limit=%d: order %d has status %s", tc.status, limit, o.ID, o.Status)
					}
				}
				if !slices.Equal(got, tc.want) {
					t.Errorf("status=%s limit=%d: ids %v, want %v", tc.status, limit, got, tc.want)
				}
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{})
	s.putProduct(t, "A", "", 10)
	s.putProduct(t, "B", "", 1)
	policy, err := s.Client.Policy(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	order := func(items string, extra string) string {
		return `{"user_id":"u-1","items":` + items + extra + `}`
	}
	manyItems := make([]string, 101)
	for i := range manyItems {
		manyItems[i] = fmt.Sprintf(`{"sku":"S%d","quantity":1}`, i)
	}
	longSKU := strings.Repeat("x", 65)
	huge := `{"user_id":"` + strings.Repeat("u", 1<<20) + `","items":[{"sku":"A","quantity":1}]}`

	type tc struct {
		name       string
		method     string
		path       string
		header     http.Header
		body       string
		wantStatus int
		wantCode   string
	}
	createCase := func(name, body string) tc {
		return tc{name, http.MethodPost, "/v1/orders", nil, body, http.StatusBadRequest, "invalid_argument"}
	}
	cases := []tc{
		createCase("malformed JSON", `{"user_id":`),
		createCase("not JSON", `user_id=u-1`),
		createCase("empty body", ``),
		createCase("array body", `[{"user_id":"u-1"}]`),
		createCase("null body", `null`),
		createCase("trailing object", order(`[{"sku":"A","quantity":1}]`, ``)+` {}`),
		createCase("trailing garbage", order(`[{"sku":"A","quantity":1}]`, ``)+`x`),
		createCase("trailing brace", order(`[{"sku":"A","quantity":1}]`, ``)+`}`),
		createCase("unknown field", order(`[{"sku":"A","quantity":1}]`, `,"coupon":"X"`)),
		createCase("unknown item field", order(`[{"sku":"A","quantity":1,"price":3}]`, ``)),
		createCase("quantity is a string", order(`[{"sku":"A","quantity":"1"}]`, ``)),
		createCase("quantity is a fraction", order(`[{"sku":"A","quantity":1.5}]`, ``)),
		createCase("user_id is a number", `{"user_id":5,"items":[{"sku":"A","quantity":1}]}`),
		createCase("items is an object", order(`{"sku":"A","quantity":1}`, ``)),
		createCase("timeout_ms overflows", order(`[{"sku":"A","quantity":1}]`, `,"timeout_ms":99999999999999999999`)),
		createCase("missing items", `{"user_id":"u-1"}`),
		createCase("null items", order(`null`, ``)),
		createCase("empty items", order(`[]`, ``)),
		createCase("null item", order(`[null]`, ``)),
		createCase("missing user_id", `{"items":[{"sku":"A","quantity":1}]}`),
		createCase("empty user_id", `{"user_id":"","items":[{"sku":"A","quantity":1}]}`),
		createCase("user_id too long", `{"user_id":"`+strings.Repeat("u", 129)+`","items":[{"sku":"A","quantity":1}]}`),
		createCase("missing quantity", order(`[{"sku":"A"}]`, ``)),
		createCase("missing sku", order(`[{"quantity":1}]`, ``)),
		createCase("quantity 0", order(`[{"sku":"A","quantity":0}]`, ``)),
		createCase("quantity -1", order(`[{"sku":"A","quantity":-1}]`, ``)),
		createCase("quantity 10001", order(`[{"sku":"A","quantity":10001}]`, ``)),
		createCase("101 items", order("["+strings.Join(manyItems, ",")+"]", ``)),
		createCase("same SKU twice", order(`[{"sku":"A","quantity":1},{"sku":"A","quantity":1}]`, ``)),
		createCase("SKU with a space", order(`[{"sku":"A B","quantity":1}]`, ``)),
		createCase("SKU with a slash", order(`[{"sku":"A/B","quantity":1}]`, ``)),
		createCase("SKU with non-ASCII", order(`[{"sku":"Aé","quantity":1}]`, ``)),
		createCase("empty SKU", order(`[{"sku":"","quantity":1}]`, ``)),
		createCase("SKU of 65 characters", order(`[{"sku":"`+longSKU+`","quantity":1}]`, ``)),
		createCase("timeout_ms 0", order(`[{"sku":"A","quantity":1}]`, `,"timeout_ms":0`)),
		createCase("timeout_ms 999", order(`[{"sku":"A","quantity":1}]`, `,"timeout_ms":999`)),
		createCase("timeout_ms 604800001", order(`[{"sku":"A","quantity":1}]`, `,"timeout_ms":604800001`)),
		createCase("timeout_ms -1000", order(`[{"sku":"A","quantity":1}]`, `,"timeout_ms":-1000`)),
		createCase("key in another case", `{"USER_ID":"u-1","items":[{"sku":"A","quantity":1}]}`),
		createCase("item key in another case", order(`[{"SKU":"A","quantity":1}]`, ``)),
		createCase("duplicate key", `{"user_id":"u-1","user_id":"u-2","items":[{"sku":"A","quantity":1}]}`),
		createCase("duplicate item key", order(`[{"sku":"A","quantity":1,"quantity":2}]`, ``)),
		{"empty Idempotency-Key", http.MethodPost, "/v1/orders", http.Header{"Idempotency-Key": {""}},
			order(`[{"sku":"A","quantity":1}]`, ``), http.StatusBadRequest, "invalid_argument"},
		{"Idempotency-Key of 256 characters", http.MethodPost, "/v1/orders", http.Header{"Idempotency-Key": {strings.Repeat("k", 256)}},
			order(`[{"sku":"A","quantity":1}]`, ``), http.StatusBadRequest, "invalid_argument"},
		{"body over 1 MiB", http.MethodPost, "/v1/orders", nil, huge, http.StatusRequestEntityTooLarge, "payload_too_large"},
		{"unknown SKU", http.MethodPost, "/v1/orders", nil,
			order(`[{"sku":"A","quantity":1},{"sku":"nope","quantity":1}]`, ``), http.StatusNotFound, "not_found"},
		{"insufficient stock", http.MethodPost, "/v1/orders", nil,
			order(`[{"sku":"A","quantity":3},{"sku":"B","quantity":2}]`, ``), http.StatusConflict, "insufficient_stock"},

		{"negative available", http.MethodPut, "/v1/products/A", nil, `{"name":"a","available":-1}`, http.StatusBadRequest, "invalid_argument"},
		{"negative available, new product", http.MethodPut, "/v1/products/C", nil, `{"available":-1}`, http.StatusBadRequest, "invalid_argument"},
		{"missing available", http.MethodPut, "/v1/products/C", nil, `{"name":"c"}`, http.StatusBadRequest, "invalid_argument"},
		{"available is a string", http.MethodPut, "/v1/products/C", nil, `{"available":"5"}`, http.StatusBadRequest, "invalid_argument"},
		{"product unknown field", http.MethodPut, "/v1/products/C", nil, `{"available":5,"price":1}`, http.StatusBadRequest, "invalid_argument"},
		{"product SKU of 65 characters", http.MethodPut, "/v1/products/" + longSKU, nil, `{"available":5}`, http.StatusBadRequest, "invalid_argument"},
		{"product SKU with a space", http.MethodPut, "/v1/products/C%20D", nil, `{"available":5}`, http.StatusBadRequest, "invalid_argument"},
		{"product category too long", http.MethodPut, "/v1/products/C", nil, `{"available":5,"category":"` + strings.Repeat("c", 65) + `"}`, http.StatusBadRequest, "invalid_argument"},
		{"available in upper case", http.MethodPut, "/v1/products/C", nil, `{"AVAILABLE":7}`, http.StatusBadRequest, "invalid_argument"},
		{"available in mixed case", http.MethodPut, "/v1/products/C", nil, `{"Available":7}`, http.StatusBadRequest, "invalid_argument"},
		{"available twice", http.MethodPut, "/v1/products/C", nil, `{"available":-5,"available":1}`, http.StatusBadRequest, "invalid_argument"},
		{"available -0", http.MethodPut, "/v1/products/C", nil, `{"available":-0}`, http.StatusBadRequest, "invalid_argument"},
		{"available -0.0", http.MethodPut, "/v1/products/C", nil, `{"available":-0.0}`, http.StatusBadRequest, "invalid_argument"},
		{"unknown product", http.MethodGet, "/v1/products/C", nil, ``, http.StatusNotFound, "not_found"},

		{"policy category timeout 999", http.MethodPut, "/v1/policies", nil, `{"default_timeout_ms":60000,"categories":{"x":999}}`, http.StatusBadRequest, "invalid_argument"},
		{"policy without default", http.MethodPut, "/v1/policies", nil, `{"categories":{"x":2000}}`, http.StatusBadRequest, "invalid_argument"},
		{"policy default 0", http.MethodPut, "/v1/policies", nil, `{"default_timeout_ms":0}`, http.StatusBadRequest, "invalid_argument"},
		{"policy category twice", http.MethodPut, "/v1/policies", nil, `{"default_timeout_ms":60000,"categories":{"x":2000,"x":3000}}`, http.StatusBadRequest, "invalid_argument"},
		{"policy key in another case", http.MethodPut, "/v1/policies", nil, `{"Default_Timeout_MS":60000}`, http.StatusBadRequest, "invalid_argument"},
		{"policy default twice", http.MethodPut, "/v1/policies", nil, `{"default_timeout_ms":60000,"default_timeout_ms":70000}`, http.StatusBadRequest, "invalid_argument"},
		{"policy empty category name", http.MethodPut, "/v1/policies", nil, `{"default_timeout_ms":60000,"categories":{"":2000}}`, http.StatusBadRequest, "invalid_argument"},

		{"limit=0", http.MethodGet, "/v1/orders?limit=0", nil, ``, http.StatusBadRequest, "invalid_argument"},
		{"limit=abc", http.MethodGet, "/v1/orders?limit=abc", nil, ``, http.StatusBadRequest, "invalid_argument"},
		{"limit=1001", http.MethodGet, "/v1/orders?limit=1001", nil, ``, http.StatusBadRequest, "invalid_argument"},
		{"limit empty", http.MethodGet, "/v1/orders?limit=", nil, ``, http.StatusBadRequest, "invalid_argument"},
		{"status=bogus", http.MethodGet, "/v1/orders?status=bogus", nil, ``, http.StatusBadRequest, "invalid_argument"},
		{"after=-1", http.MethodGet, "/v1/orders?after=-1", nil, ``, http.StatusBadRequest, "invalid_argument"},
		{"after=abc", http.MethodGet, "/v1/orders?after=abc", nil, ``, http.StatusBadRequest, "invalid_argument"},
		{"unknown query parameter", http.MethodGet, "/v1/orders?sort=desc", nil, ``, http.StatusBadRequest, "invalid_argument"},

		{"unknown order", http.MethodGet, "/v1/orders/999", nil, ``, http.StatusNotFound, "not_found"},
		{"pay unknown order", http.MethodPost, "/v1/orders/999/pay", nil, `{"payment_id":"p"}`, http.StatusNotFound, "not_found"},
		{"cancel unknown order", http.MethodPost, "/v1/orders/999/cancel", nil, ``, http.StatusNotFound, "not_found"},
		{"ship unknown order", http.MethodPost, "/v1/orders/999/ship", nil, ``, http.StatusNotFound, "not_found"},
		{"order id not a number", http.MethodGet, "/v1/orders/abc", nil, ``, http.StatusBadRequest, "invalid_argument"},
		{"order id 0", http.MethodGet, "/v1/orders/0", nil, ``, http.StatusBadRequest, "invalid_argument"},
		{"order id 01", http.MethodGet, "/v1/orders/01", nil, ``, http.StatusBadRequest, "invalid_argument"},
		{"order id +1", http.MethodGet, "/v1/orders/+1", nil, ``, http.StatusBadRequest, "invalid_argument"},
		{"order id 00", http.MethodGet, "/v1/orders/00", nil, ``, http.StatusBadRequest, "invalid_argument"},
		{"pay order id 01", http.MethodPost, "/v1/orders/01/pay", nil, `{"payment_id":"p"}`, http.StatusBadRequest, "invalid_argument"},
		{"cancel order id +1", http.MethodPost, "/v1/orders/+1/cancel", nil, ``, http.StatusBadRequest, "invalid_argument"},
		{"pay with payment_id twice", http.MethodPost, "/v1/orders/999/pay", nil, `{"payment_id":"p","payment_id":"q"}`, http.StatusBadRequest, "invalid_argument"},
		{"pay with Payment_ID", http.MethodPost, "/v1/orders/999/pay", nil, `{"Payment_ID":"p"}`, http.StatusBadRequest, "invalid_argument"},
		{"order id -1", http.MethodPost, "/v1/orders/-1/pay", nil, `{"payment_id":"p"}`, http.StatusBadRequest, "invalid_argument"},
		{"pay without payment_id", http.MethodPost, "/v1/orders/999/pay", nil, `{}`, http.StatusBadRequest, "invalid_argument"},
		{"pay with empty payment_id", http.MethodPost, "/v1/orders/999/pay", nil, `{"payment_id":""}`, http.StatusBadRequest, "invalid_argument"},
		{"pay with empty body", http.MethodPost, "/v1/orders/999/pay", nil, ``, http.StatusBadRequest, "invalid_argument"},
		{"cancel with unknown field", http.MethodPost, "/v1/orders/999/cancel", nil, `{"reason":"x"}`, http.StatusBadRequest, "invalid_argument"},

		{"unknown route", http.MethodGet, "/v1/nope", nil, ``, http.StatusNotFound, "not_found"},
		{"unknown root route", http.MethodGet, "/nope", nil, ``, http.StatusNotFound, "not_found"},
		{"unknown order action", http.MethodPost, "/v1/orders/1/refund", nil, ``, http.StatusNotFound, "not_found"},
		{"DELETE orders", http.MethodDelete, "/v1/orders", nil, ``, http.StatusMethodNotAllowed, "method_not_allowed"},
		{"PATCH product", http.MethodPatch, "/v1/products/A", nil, `{"available":1}`, http.StatusMethodNotAllowed, "method_not_allowed"},
		{"GET pay", http.MethodGet, "/v1/orders/1/pay", nil, ``, http.StatusMethodNotAllowed, "method_not_allowed"},
		{"POST policies", http.MethodPost, "/v1/policies", nil, `{"default_timeout_ms":60000}`, http.StatusMethodNotAllowed, "method_not_allowed"},
		{"POST readyz", http.MethodPost, "/readyz", nil, ``, http.StatusMethodNotAllowed, "method_not_allowed"},
	}
	for _, tc := range cases {
		// Sequential on one server: after each case nothing may have been
		// written, so a write is pinned to the case that made it.
		var body []byte
		if tc.body != "" {
			body = []byte(tc.body)
		}
		status, header, raw := s.call(t, tc.method, tc.path, tc.header, body)
		checkError(t, tc.name, status, raw, tc.wantStatus, tc.wantCode)
		if status == http.StatusMethodNotAllowed && header.Get("Allow") == "" {
			t.Errorf("%s: 405 without an Allow header", tc.name)
		}
		s.wantStock(t, tc.name, "A", stock{10, 0, 0})
		s.wantStock(t, tc.name, "B", stock{1, 0, 0})
		if st, _, raw := s.call(t, http.MethodGet, "/v1/products/C", nil, nil); st != http.StatusNotFound {
			t.Errorf("%s: product C exists (status %d, body %s)", tc.name, st, raw)
		}
		if n := len(s.allOrders(t, "", 1000)); n != 0 {
			t.Errorf("%s: %d orders exist, want 0", tc.name, n)
		}
		if p, err := s.Client.Policy(t.Context()); err != nil || !reflect.DeepEqual(p, policy) {
			t.Errorf("%s: policy = %+v, %v; want unchanged %+v", tc.name, p, err, policy)
		}
	}
}

func TestAuthToken(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
	s := startServer(t, serverConfig{Token: token})
	for _, tc := range []struct {
		name          string
		authorization []string // nil: no header
		wantStatus    int
	}{
		{"no header", nil, http.StatusUnauthorized},
		{"empty", []string{""}, http.StatusUnauthorized},
		{"wrong token", []string{"Bearer wrong"}, http.StatusUnauthorized},
		{"token prefix", []string{"Bearer " + token[:5]}, http.StatusUnauthorized},
		{"token with suffix", []string{"Bearer " + token + "x"}, http.StatusUnauthorized},
		{"no scheme", []string{token}, http.StatusUnauthorized},
		{"basic scheme", []string{"Basic " + token}, http.StatusUnauthorized},
		{"scheme with no space", []string{"Bearer" + token}, http.StatusUnauthorized},
		{"right token", []string{"Bearer " + token}, http.StatusOK},
		{"scheme in lower case", []string{"bearer " + token}, http.StatusOK},
		{"scheme in upper case", []string{"BEARER " + token}, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{"Authorization": tc.authorization}
			for _, r := range []struct{ method, path, body string }{
				{http.MethodGet, "/v1/orders", ""},
				{http.MethodGet, "/v1/policies", ""},
				{http.MethodPut, "/v1/products/auth-1", `{"available":5}`},
				{http.MethodGet, "/v1/products/auth-1", ""},
			} {
				var body []byte
				if r.body != "" {
					body = []byte(r.body)
				}
				status, header, raw := s.call(t, r.method, r.path, h, body)
				what := r.method + " " + r.path
				if tc.wantStatus == http.StatusOK {
					if status != http.StatusOK {
						t.Errorf("%s: status %d, want 200; body %s", what, status, raw)
					}
					continue
				}
				checkError(t, what, status, raw, http.StatusUnauthorized, "unauthorized")
				if header.Get("WWW-Authenticate") == "" {
					t.Errorf("%s: 401 without WWW-Authenticate", what)
				}
			}
			if tc.wantStatus != http.StatusOK {
				// A refused create must write nothing.
				status, _, raw := s.call(t, http.MethodPost, "/v1/orders", h,
					[]byte(`{"user_id":"u","items":[{"sku":"auth-1","quantity":1}],"timeout_ms":60000}`))
				checkError(t, "POST /v1/orders", status, raw, http.StatusUnauthorized, "unauthorized")
				// Nor may a refused product put.
				if status, _, raw := s.call(t, http.MethodGet, "/v1/products/auth-1", nil, nil); status != http.StatusNotFound {
					t.Errorf("product written by an unauthorized PUT: status %d, body %s", status, raw)
				}
			}
		})
	}
	if n := len(s.allOrders(t, "", 1000)); n != 0 {
		t.Errorf("%d orders exist after unauthorized creates, want 0", n)
	}
	s.wantStock(t, "after unauthorized requests", "auth-1", stock{5, 0, 0})
	// Probes need no token.
	for _, path := range []string{"/healthz", "/readyz"} {
		if status, _, raw := s.call(t, http.MethodGet, path, http.Header{"Authorization": nil}, nil); status != http.StatusOK {
			t.Errorf("GET %s without a token: status %d, body %s", path, status, raw)
		}
	}
}

// TestAnswerLengths checks that small answers (counted by net/http) and
// large ones (by writeJSON) are sent with their Content-Length, a HEAD's
// included.
func TestAnswerLengths(t *testing.T) {
	s := startServer(t, serverConfig{})
	s.putProduct(t, "LEN-1", "physical", 100)
	for range 8 {
		s.createOrder(t, `{"user_id":"u","items":[{"sku":"LEN-1","quantity":1}],"timeout_ms":600000}`)
	}
	for _, tc := range []struct {
		method, path string
		small        bool // at most the answer writeJSON leaves to net/http
	}{
		{http.MethodGet, "/v1/orders?limit=1", true},
		{http.MethodGet, "/v1/orders?limit=8", false},
		{http.MethodGet, "/v1/orders/999999", true}, // a 404
		{http.MethodHead, "/v1/orders?limit=1", true},
		{http.MethodHead, "/v1/orders?limit=8", false},
	} {
		status, header, raw := s.call(t, tc.method, tc.path, nil, nil)
		if status != http.StatusOK && status != http.StatusNotFound {
			t.Fatalf("%s %s: status %d, body %s", tc.method, tc.path, status, raw)
		}
		n, err := strconv.Atoi(header.Get("Content-Length"))
		if err != nil || n == 0 || (tc.method == http.MethodGet && n != len(raw)) {
			t.Errorf("%s %s: Content-Length %q, body of %d bytes", tc.method, tc.path, header.Get("Content-Length"), len(raw))
		}
		if small := n <= 1024; small != tc.small {
			t.Errorf("%s %s: an answer of %d bytes; the case wants one on the other side of 1 KiB", tc.method, tc.path, n)
		}
	}
}
