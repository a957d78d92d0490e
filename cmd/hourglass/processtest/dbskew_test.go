package processtest

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store/mysql/galeratest"
	"github.com/hourglass/hourglass/store/mysql/mytest"
)

// EnvGaleraSkew, set to 1, runs TestGaleraClockSkew: it restarts node 3 of
// the shared Galera cluster (scripts/galera) twice, which fails the Galera
// tests of anyone using the cluster meanwhile.
const EnvGaleraSkew = "HOURGLASS_TEST_GALERA_SKEW"

// TestGaleraClockSkew: three nodes on a 3-node Galera cluster, each on its
// own Galera node; then Galera node 3's clock is put 2 s ahead (its mariadbd
// restarted under libfaketime, scripts/galera skew 3 +2s). The hourglass
// node on it (node 2) sees its server ahead of the others' by more than
// --max-db-clock-skew (100ms): /readyz answers 503 naming the skew there
// (200 on the others), it works no partition (the two others own all 64),
// every node shows hourglass_db_clock_skew_seconds ≈ 2, and the leader
// fires db_clock_skew. Orders created through the two ready nodes then
// close, none early: node 2 closes none, and every closed_at (written by
// servers on the true clock) is at or after its deadline. Node 3's clock
// is restored at the end.
func TestGaleraClockSkew(t *testing.T) {
	testenv.Require(t, testenv.Processes)
	if os.Getenv(EnvGaleraSkew) != "1" {
		t.Skipf("restarts node 3 of the shared Galera cluster; set %s=1 to run it", EnvGaleraSkew)
	}
	script, err := filepath.Abs(repoFile("scripts", "galera"))
	if err != nil {
		t.Fatal(err)
	}
	galera := func(args ...string) {
		t.Helper()
		out, err := exec.Command(script, args...).CombinedOutput()
		t.Logf("scripts/galera %s:\n%s", strings.Join(args, " "), out)
		if err != nil {
			t.Fatalf("scripts/galera %s: %v", strings.Join(args, " "), err)
		}
	}
	const ttl = 2 * time.Second
	urls := galeratest.NewDatabase(t)
	s := startCluster(t, urls, 3, ttl)
	ctx := t.Context()

	galera("skew", "3", "+2s")
	t.Cleanup(func() { galera("skew", "3", "0") })
	dbs := make([]*sql.DB, len(urls))
	for i, u := range urls {
		dbs[i] = mytest.Admin(t, u)
	}
	var ahead float64
	if err := dbs[2].QueryRowContext(ctx, `SELECT UNIX_TIMESTAMP(NOW(6))`).Scan(&ahead); err != nil {
		t.Fatal(err)
	}
	if d := ahead - float64(time.Now().UnixMicro())/1e6; d < 1.8 || d > 2.5 {
		t.Fatalf("Galera node 3's clock is %.3fs off this machine's after skew 3 +2s", d)
	}

	c := s.cluster
	readyz := func(i int) (int, string) {
		resp, err := http.Get(c.Node(i).URL() + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	owned := func(i int) int {
		v, err := api.NewClient(c.Node(0).URL(), "", nil).Cluster(ctx)
		if err != nil {
			return -1
		}
		for _, n := range v.Nodes {
			if n.ID == c.Node(i).ID() {
				return len(n.Partitions)
			}
		}
		return 0
	}
	skewOf := func(i int) float64 {
		v, err := strconv.ParseFloat(metricLine(t, c.Node(i).URL(), "hourglass_db_clock_skew_seconds"), 64)
		if err != nil {
			return -1
		}
		return v
	}
	// Node 2's pool reconnects after the restart; its next heartbeat
	// publishes the new offset.
	testenv.EventuallyEvery(t, 30*time.Second, 100*time.Millisecond, "node 2 answers 503 on /readyz naming the skew, and owns nothing", func() bool {
		code, body := readyz(2)
		return code == http.StatusServiceUnavailable && strings.Contains(body, "clock skew") && owned(2) == 0
	})
	code, body := readyz(2)
	t.Logf("node 2: /readyz %d %s", code, body)
	for _, i := range []int{0, 1} {
		if code, body := readyz(i); code != http.StatusOK {
			t.Errorf("node %d, whose server is behind: /readyz %d %s, want 200", i, code, body)
		}
	}
	if got := owned(0) + owned(1); got != 64 {
		t.Errorf("nodes 0 and 1 own %d partitions, want all 64", got)
	}
	for i := range 3 {
		if v := skewOf(i); v < 1.8 || v > 2.5 {
			t.Errorf("node %d: hourglass_db_clock_skew_seconds = %g, want about 2", i, v)
		}
	}
	// The leader (node 0 or 1) evaluates every --alert-interval (5s).
	testenv.EventuallyEvery(t, 20*time.Second, 100*time.Millisecond, "db_clock_skew fires on the leader", func() bool {
		for i := range 3 {
			if metricLine(t, c.Node(i).URL(), `hourglass_alerts_firing{rule="db_clock_skew"}`) == "1" {
				return true
			}
		}
		return false
	})
	closedBy2 := func() string {
		return metricLine(t, c.Node(2).URL(), `hourglass_orders_closed_total{by="scheduler"}`) + "+" +
			metricLine(t, c.Node(2).URL(), `hourglass_orders_closed_total{by="sweeper"}`)
	}
	before := closedBy2()

	// Orders through the two ready nodes (as a load balancer sends them),
	// due within 1-3 s.
	clients := []*api.Client{api.NewClient(c.Node(0).URL(), "", nil), api.NewClient(c.Node(1).URL(), "", nil)}
	if _, err := clients[0].PutProduct(ctx, "SKEW", "skew", "physical", 1_000_000); err != nil {
		t.Fatal(err)
	}
	// Watch in real time, on this machine's clock (the true one, as node
	// 0's server's): an order listed closed through node 0 before its
	// deadline was closed early (node 0 derives closed for an overdue
	// pending order only once its deadline has passed by the true clock).
	// closed_at cannot say it: a close by node 2 is stamped by its clock.
	watched := make(chan int)
	watchCtx, stopWatch := context.WithCancel(ctx)
	go func() {
		early := map[int64]bool{}
		for watchCtx.Err() == nil {
			list, err := clients[0].ListOrders(watchCtx, "closed", 1000, 0)
			now := time.Now()
			for _, o := range list.Orders {
				if d, perr := time.Parse(time.RFC3339Nano, o.Deadline); perr == nil && err == nil && d.After(now.Add(50*time.Millisecond)) && !early[o.ID] {
					early[o.ID] = true
					t.Logf("order %d listed closed at %s, %s before its deadline %s", o.ID, now.Format(time.StampMilli), d.Sub(now).Round(time.Millisecond), o.Deadline)
				}
			}
			testenv.Until(watchCtx, now.Add(50*time.Millisecond))
		}
		watched <- len(early)
	}()
	const orders = 200
	var ids []int64
	start := time.Now()
	for i := range orders {
		if !testenv.Until(ctx, start.Add(time.Duration(i)*5*time.Millisecond)) { // spread over a second at least
			t.Fatal(ctx.Err())
		}
		o, _, err := clients[i%2].CreateOrder(ctx, api.CreateOrderRequest{UserID: fmt.Sprint("u", i),
			Items: []api.ItemJSON{{SKU: "SKEW", Quantity: 1}}, TimeoutMs: 1000 + int64(i%20)*100}, "")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, o.ID)
	}
	testenv.EventuallyEvery(t, 30*time.Second, 100*time.Millisecond, "every order closed", func() bool {
		var n int
		if err := dbs[0].QueryRowContext(ctx, `SELECT COUNT(*) FROM orders WHERE status = 'closed'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == orders
	})
	stopWatch()
	if n := <-watched; n > 0 {
		t.Errorf("%d of %d orders closed before their deadline by the true clock", n, orders)
	}
	// And by the database: with every close committed by node 0 or 1, on
	// servers with the true clock, closed_at is when it happened.
	var early int
	var worst sql.NullInt64
	if err := dbs[0].QueryRowContext(ctx, `SELECT COUNT(*), MIN(closed_at - deadline) FROM orders WHERE closed_at < deadline`).Scan(&early, &worst); err != nil {
		t.Fatal(err)
	}
	if early > 0 {
		t.Errorf("%d of %d orders closed before their deadline (the earliest %d ms early)", early, orders, -worst.Int64)
	}
	var late sql.NullInt64
	if err := dbs[0].QueryRowContext(ctx, `SELECT MAX(closed_at - deadline) FROM orders`).Scan(&late); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d orders closed, none early; the latest %d ms after its deadline", orders, late.Int64)
	if after := closedBy2(); after != before {
		t.Errorf("node 2, whose server is ahead, closed orders: hourglass_orders_closed_total %s before the load, %s after", before, after)
	}
}
