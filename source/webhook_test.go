package source_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/webhook"
)

// TestSourceClosedWebhook: a source.closed event is delivered like every
// event, signed, to a webhook subscribed to source.closed, with the body
// and headers the OpenAPI document's webhooks entry describes.
func TestSourceClosedWebhook(t *testing.T) {
	const secret = "a-webhook-secret-of-32-bytes-xxx"
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	item := doc.Webhooks[string(hourglass.EventSourceClosed)]
	if item == nil || item.Post == nil {
		t.Fatal("the OpenAPI document has no source.closed webhook")
	}
	schema := item.Post.RequestBody.Value.Content.Get("application/json").Schema.Value
	for name, open := range shops() {
		t.Run(name, func(t *testing.T) {
			db, shop := open(t)
			shop.Create(t, true)
			shop.PutStock(t, "A", 10)
			var (
				mu     sync.Mutex
				bodies [][]byte
				hdrs   []http.Header
			)
			rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				bodies, hdrs = append(bodies, b), append(hdrs, r.Header.Clone())
				mu.Unlock()
				w.WriteHeader(http.StatusNoContent)
			}))
			t.Cleanup(rcv.Close)
			allow, err := webhook.ParseAllowList("127.0.0.1")
			if err != nil {
				t.Fatal(err)
			}
			hooks, err := webhook.New(db, webhook.Config{Allow: allow, Jitter: -1})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := hooks.CreateWebhook(t.Context(), hourglass.WebhookParams{URL: rcv.URL + "/hook", Events: []hourglass.EventType{hourglass.EventSourceClosed}, Secret: secret}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); hooks.Run(ctx) }()
			t.Cleanup(func() { cancel(); <-done })
			run(t, db, shop.Source("shop_orders"), &observer{})
			id := shop.Order(t, "u", 300*time.Millisecond, "A", 1)

			testenv.Eventually(t, 10*time.Second, "the source.closed delivery", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(bodies) > 0
			})
			mu.Lock()
			defer mu.Unlock()
			var body any
			if err := json.Unmarshal(bodies[0], &body); err != nil {
				t.Fatal(err)
			}
			if err := schema.VisitJSON(body, openapi3.EnableJSONSchema2020()); err != nil {
				t.Errorf("the body breaks the document: %v\n%s", err, bodies[0])
			}
			for _, p := range item.Post.Parameters {
				v := hdrs[0].Get(p.Value.Name)
				if v == "" && p.Value.Required {
					t.Errorf("header %s missing", p.Value.Name)
					continue
				}
				if err := p.Value.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
					t.Errorf("header %s %q breaks the document: %v", p.Value.Name, v, err)
				}
			}
			if err := webhook.Verify(hdrs[0].Get(webhook.SignatureHeader), secret, bodies[0], time.Now(), time.Minute); err != nil {
				t.Error(err)
			}
			if !strings.Contains(string(bodies[0]), `"key":`) || body.(map[string]any)["key"] != float64(id) {
				t.Errorf("body %s; want key %d", bodies[0], id)
			}
		})
	}
}
