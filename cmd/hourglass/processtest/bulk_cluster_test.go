package processtest

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/hourglasstest/nodes"
	"github.com/hourglass/hourglass/internal/testenv"
)

// TestBulkKill: two nodes on one database; a filtered extend_orders (each
// order's deadline + 60 s: not idempotent, so an item done twice would
// show) runs at 300 items a second on one of them, which is SIGKILLed
// mid-way. The other node takes the action over once the dead node's lease
// runs out and finishes it: every order was extended exactly once (its
// deadline 60 s later than it was, one order.extended event), done counts
// each once, nothing failed. It runs in parallel (after the sequential
// tests, beside TestEventSinksSurviveKill), its stores too: it bounds no
// lateness, and each store waits most of its time for the action's lease
// (bulk.LeaseDefault, 10 s) to run out.
func TestBulkKill(t *testing.T) {
	testenv.Require(t, testenv.Processes)
	t.Parallel()
	for _, kind := range sharedStores {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := setupCluster(t, kind, 2, 2*time.Second)
			testBulkKill(t, s.cluster)
		})
	}
}

func testBulkKill(t *testing.T, c *nodes.Cluster) {
	// Enough for the action to be a third done at the kill and two thirds
	// left for the survivor (about 1.3 s at 300 a second): the kill is
	// checked to come mid-way below.
	const n = 600
	ctx := t.Context()
	hc := &http.Client{Timeout: 30 * time.Second}
	client := func(nd *nodes.Node) *api.Client { return api.NewClient(nd.URL(), "", hc) }
	cl := client(c.Node(0))
	if _, err := cl.PutProduct(ctx, "mug", "Mug", "kitchen", 1_000_000); err != nil {
		t.Fatal(err)
	}
	before := make(map[int64]string, n)
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		bad error
	)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				o, _, err := client(c.Node(i%2)).CreateOrder(ctx, api.CreateOrderRequest{UserID: "bulk-kill", Items: []api.ItemJSON{{SKU: "mug", Quantity: 1}}, TimeoutMs: 3_600_000}, "")
				mu.Lock()
				if err != nil {
					bad = err
				} else {
					before[o.ID] = o.Deadline
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if bad != nil {
		t.Fatal(bad)
	}
	a, created, err := cl.StartBulkAction(ctx, api.BulkRequest{Action: "extend_orders", Reason: "kill test", Rate: 300,
		Filter: map[string]string{"user_id": "bulk-kill"}, Extend: &api.ExtendRequest{ExtendMs: 60_000}})
	if err != nil || !created {
		t.Fatalf("start: %+v %v %v", a, created, err)
	}
	var owner string
	testenv.Eventually(t, 30*time.Second, "a third done", func() bool {
		got, err := cl.BulkAction(ctx, a.ID)
		if err == nil && got.Node != nil {
			owner = *got.Node
		}
		return err == nil && got.Done >= n/3
	})
	var victim, survivor *nodes.Node
	for _, nd := range c.Nodes() {
		if strings.HasPrefix(owner, nd.ID()+"/") {
			victim = nd
		} else {
			survivor = nd
		}
	}
	if victim == nil || survivor == nil {
		t.Fatalf("runner %q is none of the nodes", owner)
	}
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	mid, err := client(survivor).BulkAction(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s at %d done", victim.ID(), mid.Done)
	if mid.Done >= n || mid.State != "running" {
		t.Fatalf("the action was %s with %d of %d done at the kill: nothing was left to take over (the test's timing is off)", mid.State, mid.Done, n)
	}
	var done api.BulkActionJSON
	testenv.Eventually(t, 60*time.Second, "the action done on the survivor", func() bool {
		done, err = client(survivor).BulkAction(ctx, a.ID)
		return err == nil && done.State != "running"
	})
	t.Logf("finished %s after the kill: %+v", time.Since(killedAt).Round(time.Millisecond), done)
	if done.State != "done" || done.Done != n || done.Failed != 0 || done.Matched != n {
		t.Fatalf("finished: %+v, want done %d, none failed", done, n)
	}
	// Every order exactly 60 s later than it was.
	seen := 0
	for after := ""; ; {
		p, err := client(survivor).FindOrders(ctx, api.OrderQuery{UserID: "bulk-kill", Limit: 1000, After: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range p.Orders {
			was, _ := time.Parse(time.RFC3339Nano, before[o.ID])
			now, _ := time.Parse(time.RFC3339Nano, o.Deadline)
			if d := now.Sub(was); d != time.Minute {
				t.Errorf("order %d: deadline moved %s, want 1m (done twice?)", o.ID, d)
			}
			seen++
		}
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	if seen != n {
		t.Fatalf("listed %d orders, want %d", seen, n)
	}
}
