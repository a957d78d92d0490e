package hourglasstest

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// exerciseWebhooks covers the webhook subscriptions of WebhookStore:
// CreateWebhook, Webhooks, Webhook, DeleteWebhook.
func exerciseWebhooks(t *testing.T, h StoreHarness) {
	setup := func(t *testing.T) storeFixture { return setupStore(t, h) }

	t.Run("CreateValidates", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		ok := hourglass.WebhookParams{URL: "https://hooks.example.com/a", Events: []hourglass.EventType{hourglass.EventOrderPaid}, Secret: webhookSecret}
		with := func(change func(*hourglass.WebhookParams)) hourglass.WebhookParams {
			p := ok
			change(&p)
			return p
		}
		for _, tt := range []struct {
			name string
			p    hourglass.WebhookParams
		}{
			{"no url", with(func(p *hourglass.WebhookParams) { p.URL = "" })},
			{"relative url", with(func(p *hourglass.WebhookParams) { p.URL = "/hooks" })},
			{"ftp", with(func(p *hourglass.WebhookParams) { p.URL = "ftp://hooks.example.com/a" })},
			{"no host", with(func(p *hourglass.WebhookParams) { p.URL = "https:///a" })},
			{"credentials", with(func(p *hourglass.WebhookParams) { p.URL = "https://u:p@hooks.example.com/a" })},
			{"fragment", with(func(p *hourglass.WebhookParams) { p.URL = "https://hooks.example.com/a#x" })},
			{"url too long", with(func(p *hourglass.WebhookParams) {
				p.URL = "https://hooks.example.com/" + strings.Repeat("a", hourglass.MaxWebhookURL)
			})},
			{"no events", with(func(p *hourglass.WebhookParams) { p.Events = nil })},
			{"unknown event", with(func(p *hourglass.WebhookParams) { p.Events = []hourglass.EventType{"order.refunded"} })},
			{"event twice", with(func(p *hourglass.WebhookParams) {
				p.Events = []hourglass.EventType{hourglass.EventOrderPaid, hourglass.EventOrderPaid}
			})},
			{"all and more", with(func(p *hourglass.WebhookParams) {
				p.Events = []hourglass.EventType{hourglass.EventTypeAll, hourglass.EventOrderPaid}
			})},
			{"short secret", with(func(p *hourglass.WebhookParams) { p.Secret = webhookSecret[:hourglass.MinWebhookSecret-1] })},
			{"long secret", with(func(p *hourglass.WebhookParams) { p.Secret = strings.Repeat("s", hourglass.MaxWebhookSecret+1) })},
		} {
			if _, err := f.db.CreateWebhook(f.ctx, tt.p, 0); hourglass.ErrorCode(err) != hourglass.CodeInvalidArgument {
				t.Errorf("%s: %v, want invalid_argument", tt.name, err)
			}
		}
		if ws, err := f.db.Webhooks(f.ctx, hourglass.WebhookFilter{Limit: 100}); err != nil || len(ws) != 0 {
			t.Fatalf("webhooks after invalid creates: %+v, %v", ws, err)
		}
		f.clock.Advance(1234 * time.Millisecond)
		multi := with(func(p *hourglass.WebhookParams) {
			p.Events = []hourglass.EventType{hourglass.EventOrderShipped, hourglass.EventOrderCreated, hourglass.EventOrderClosed}
			p.Secret = strings.Repeat("s", hourglass.MaxWebhookSecret)
		})
		w, err := f.db.CreateWebhook(f.ctx, multi, 0)
		want := hourglass.Webhook{ID: w.ID, URL: multi.URL, Events: multi.Events, Secret: multi.Secret, CreatedAt: f.clock.Now()}
		if err != nil || w.ID == 0 || !sameWebhook(w, want) {
			t.Fatalf("CreateWebhook = %+v, %v; want %+v", w, err, want)
		}
		if got, err := f.db.Webhook(f.ctx, w.ID); err != nil || !sameWebhook(got, want) {
			t.Fatalf("Webhook(%d) = %+v, %v; want %+v", w.ID, got, err, want)
		}
	})

	t.Run("ListGetDelete", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		var want []hourglass.Webhook
		for i := range 7 {
			events := []hourglass.EventType{hourglass.EventTypeAll}
			if i%2 == 1 {
				events = []hourglass.EventType{hourglass.EventOrderPaid, hourglass.EventOrderCancelled}
			}
			want = append(want, f.webhook(t, fmt.Sprint("w", i), events...))
			f.clock.Advance(time.Millisecond)
		}
		page := func(t *testing.T, limit int) []hourglass.Webhook {
			t.Helper()
			var got []hourglass.Webhook
			for after, n := int64(0), 0; ; n++ {
				if n > maxPages {
					t.Fatalf("Webhooks paging does not end: the cursor does not advance")
				}
				ws, err := f.db.Webhooks(f.ctx, hourglass.WebhookFilter{After: after, Limit: limit})
				if err != nil {
					t.Fatal(err)
				}
				if len(ws) > limit {
					t.Fatalf("limit %d: a page of %d", limit, len(ws))
				}
				got = append(got, ws...)
				if len(ws) < limit {
					return got
				}
				after = ws[len(ws)-1].ID
			}
		}
		same := func(got, want []hourglass.Webhook) bool {
			if len(got) != len(want) {
				return false
			}
			for i := range got {
				if !sameWebhook(got[i], want[i]) {
					return false
				}
			}
			return true
		}
		for _, limit := range []int{1, 3, 7, 100} {
			if got := page(t, limit); !same(got, want) {
				t.Errorf("paged by %d:\n%+v\nwant\n%+v", limit, got, want)
			}
		}
		for _, w := range want {
			if got, err := f.db.Webhook(f.ctx, w.ID); err != nil || !sameWebhook(got, w) {
				t.Errorf("Webhook(%d) = %+v, %v; want %+v", w.ID, got, err, w)
			}
		}
		last := want[len(want)-1].ID
		for _, id := range []int64{0, -1, last + 1000} {
			_, err := f.db.Webhook(f.ctx, id)
			wantCode(t, err, hourglass.CodeNotFound)
			_, err = f.db.DeleteWebhook(f.ctx, id)
			wantCode(t, err, hourglass.CodeNotFound)
		}
		if got := page(t, 100); !same(got, want) {
			t.Fatalf("deleting unknown ids changed the webhooks: %+v", got)
		}
		got, err := f.db.DeleteWebhook(f.ctx, want[3].ID)
		if err != nil || !sameWebhook(got, want[3]) {
			t.Fatalf("DeleteWebhook = %+v, %v; want %+v", got, err, want[3])
		}
		_, err = f.db.DeleteWebhook(f.ctx, want[3].ID)
		wantCode(t, err, hourglass.CodeNotFound)
		_, err = f.db.Webhook(f.ctx, want[3].ID)
		wantCode(t, err, hourglass.CodeNotFound)
		rest := append(append([]hourglass.Webhook(nil), want[:3]...), want[4:]...)
		if got := page(t, 2); !same(got, rest) {
			t.Fatalf("after delete: %+v, want %+v", got, rest)
		}
	})

	t.Run("Limit", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		p := hourglass.WebhookParams{URL: "https://hooks.example.com/x", Events: []hourglass.EventType{hourglass.EventTypeAll}, Secret: webhookSecret}
		first, err := f.db.CreateWebhook(f.ctx, p, 2)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.db.CreateWebhook(f.ctx, p, 2); err != nil {
			t.Fatal(err)
		}
		_, err = f.db.CreateWebhook(f.ctx, p, 2)
		wantCode(t, err, hourglass.CodeLimitExceeded)
		_, err = f.db.CreateWebhook(f.ctx, p, 1)
		wantCode(t, err, hourglass.CodeLimitExceeded)
		if ws, _ := f.db.Webhooks(f.ctx, hourglass.WebhookFilter{Limit: 100}); len(ws) != 2 {
			t.Fatalf("%d webhooks after a refused create, want 2", len(ws))
		}
		// An invalid webhook is invalid whatever the count.
		_, err = f.db.CreateWebhook(f.ctx, hourglass.WebhookParams{URL: "x"}, 2)
		wantCode(t, err, hourglass.CodeInvalidArgument)
		if _, err := f.db.CreateWebhook(f.ctx, p, 3); err != nil {
			t.Fatalf("under a higher limit: %v", err)
		}
		if _, err := f.db.CreateWebhook(f.ctx, p, 0); err != nil {
			t.Fatalf("limit 0 (none): %v", err)
		}
		if _, err := f.db.DeleteWebhook(f.ctx, first.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := f.db.CreateWebhook(f.ctx, p, 4); err != nil {
			t.Fatalf("after a delete freed a place: %v", err)
		}
		_, err = f.db.CreateWebhook(f.ctx, p, 4)
		wantCode(t, err, hourglass.CodeLimitExceeded)
	})

	t.Run("LimitUnderConcurrency", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		const goroutines, limit = 24, 5
		var created, refused atomic.Int64
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := hourglass.WebhookParams{URL: fmt.Sprint("https://hooks.example.com/", g), Events: []hourglass.EventType{hourglass.EventTypeAll}, Secret: webhookSecret}
				_, err := f.db.CreateWebhook(f.ctx, p, limit)
				switch {
				case err == nil:
					created.Add(1)
				case hourglass.ErrorCode(err) == hourglass.CodeLimitExceeded:
					refused.Add(1)
				default:
					t.Errorf("CreateWebhook: %v", err)
				}
			}()
		}
		wg.Wait()
		ws, err := f.db.Webhooks(f.ctx, hourglass.WebhookFilter{Limit: 100})
		if err != nil || len(ws) != limit || created.Load() != limit || refused.Load() != goroutines-limit {
			t.Fatalf("%d webhooks (%v), %d created, %d refused; want exactly %d created", len(ws), err, created.Load(), refused.Load(), limit)
		}
	})
}
