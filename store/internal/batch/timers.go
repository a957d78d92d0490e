package batch

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
)

// The named timers' part of a batch: ArmTimer, CancelTimer and FireTimers
// are ops like the order writes. Step 3 locks the timers armed or cancelled
// by key (a key with no row locks nothing), then those fired by id, and
// reads which webhooks the arms name (no lock: a webhook deleted later
// leaves its timers dangling, as documented). Step 5 decides each timer op
// in queue order on the locked rows, so the same key twice in one batch
// behaves as two calls one after the other: a second arming of a key the
// batch creates re-arms it (created=false), a cancel after it cancels it.
// Step 6 writes each timer row once: the created timers in key order (two
// batches creating some of the same keys wait for each other in one order
// rather than deadlock), the re-armed ones whole, the fired and the
// cancelled by status.
//
// Exactly one arming creates a key, however many store values or
// processes race it: each finds no row, the first insert to commit wins,
// and the others' inserts fail with a duplicate key (or a lost
// certification on Galera); their batches run again, find its row and
// re-arm it.

// timers holds the timers of one batch.
type timers struct {
	byKey map[string]*Timer
	byID  map[int64]*Timer
	// armed lists the timers armed by the batch, in the order of their
	// first arming.
	armed []*Timer
	// webhooks holds which of the webhooks named by the arms exist.
	webhooks map[int64]bool
}

// lock locks the rows of keys, then of ids (those still scheduled), and
// reads which of webhookIDs exist. keys and ids may repeat.
func (bt *timers) lock(ctx context.Context, tx Tx, keys []string, ids []int64, webhookIDs []int64) error {
	bt.byKey, bt.byID, bt.webhooks = map[string]*Timer{}, map[int64]*Timer{}, map[int64]bool{}
	add := func(rows []*Timer) {
		for _, t := range rows {
			t.Exists = true
			bt.byKey[t.T.Key], bt.byID[t.T.ID] = t, t
		}
	}
	if len(keys) > 0 {
		slices.Sort(keys) // bytewise, the order of the binary key
		rows, err := tx.LockTimerKeys(ctx, slices.Compact(keys))
		if err != nil {
			return err
		}
		add(rows)
	}
	var rest []int64
	slices.Sort(ids)
	for _, id := range slices.Compact(ids) {
		if bt.byID[id] == nil { // not locked by its key already
			rest = append(rest, id)
		}
	}
	if len(rest) > 0 {
		rows, err := tx.LockTimerIDs(ctx, rest)
		if err != nil {
			return err
		}
		add(rows)
	}
	if len(webhookIDs) > 0 {
		slices.Sort(webhookIDs)
		var err error
		if bt.webhooks, err = tx.Webhooks(ctx, slices.Compact(webhookIDs)); err != nil {
			return err
		}
	}
	return nil
}

// arm decides an ArmTimer at now, as TimerStore.ArmTimer says. It returns
// the timer the result names (whose ID a created timer gets at its insert).
func (bt *timers) arm(p hourglass.ArmTimerParams, now time.Time) (*Timer, Result) {
	t := bt.byKey[p.Key]
	if t != nil && t.T.Status == hourglass.TimerScheduled && bytes.Equal(t.Hash, p.RequestHash) {
		return t, Result{Timer: t.T} // a retry of the arming that scheduled it
	}
	if p.WebhookID != 0 && !bt.webhooks[p.WebhookID] {
		return nil, Result{Err: plan.UnknownWebhook(p.WebhookID)}
	}
	created := t == nil
	if created {
		t = &Timer{T: hourglass.Timer{Key: p.Key, CreatedAt: now}}
		bt.byKey[p.Key] = t
	}
	if !t.armed {
		t.armed = true
		bt.armed = append(bt.armed, t)
	}
	nowMs := hourglass.UnixMilli(now)
	fireMs := nowMs + p.Delay.Milliseconds()
	if !p.FireAt.IsZero() {
		fireMs = max(hourglass.UnixMilli(p.FireAt), nowMs)
	}
	t.T.Status, t.T.FireAt, t.T.FiredAt, t.T.UpdatedAt = hourglass.TimerScheduled, hourglass.FromUnixMilli(fireMs), time.Time{}, now
	t.T.Payload, t.T.WebhookID = bytes.Clone(p.Payload), p.WebhookID
	t.Hash = bytes.Clone(p.RequestHash)
	if t.Hash == nil {
		t.Hash = []byte{}
	}
	t.dirty = true
	return t, Result{Timer: t.T, Created: created}
}

// cancel decides a CancelTimer at now.
func (bt *timers) cancel(key string, now time.Time) (*Timer, Result) {
	t := bt.byKey[key]
	if t == nil {
		return nil, Result{Err: plan.TimerNotFound(key)}
	}
	switch t.T.Status {
	case hourglass.TimerFired:
		return nil, Result{Err: plan.TimerFired(key, t.T.FiredAt)}
	case hourglass.TimerScheduled:
		t.T.Status, t.T.UpdatedAt = hourglass.TimerCancelled, now
		t.dirty = true
		return t, Result{Timer: t.T, Changed: true}
	}
	return t, Result{Timer: t.T}
}

// fire decides a FireTimers of ids (ascending) at now: each still
// scheduled and due is fired, with its timer.fired event, which it returns.
func (bt *timers) fire(ids []int64, now time.Time) ([]hourglass.FiredTimer, []*Event, error) {
	var (
		fired  []hourglass.FiredTimer
		events []*Event
	)
	for _, id := range ids {
		t := bt.byID[id]
		if t == nil || t.T.Status != hourglass.TimerScheduled || t.T.FireAt.After(now) {
			continue // fired, cancelled, unknown or not yet due: nothing to do
		}
		t.T.Status, t.T.FiredAt, t.T.UpdatedAt = hourglass.TimerFired, now, now
		t.dirty = true
		evID := hourglass.NewEventID()
		body := hourglass.MarshalTimerEvent(evID, t.T)
		if body == nil {
			return nil, nil, fmt.Errorf("timer %q: its stored payload is not valid JSON", t.T.Key)
		}
		events = append(events, &Event{ID: evID, Type: hourglass.EventTimerFired, Subject: id, Body: body, WebhookID: t.T.WebhookID, newIdx: -1})
		fired = append(fired, hourglass.FiredTimer{ID: id, Key: t.T.Key, FireAt: t.T.FireAt, FiredAt: now})
	}
	return fired, events, nil
}

// write inserts the created timers (giving them their ids), then writes
// every changed row once: the re-armed ones whole, the others (fired or
// cancelled) by status.
func (bt *timers) write(ctx context.Context, tx Tx, now time.Time) error {
	var news, rearmed []*Timer
	for _, t := range bt.armed {
		if t.Exists {
			rearmed = append(rearmed, t)
		} else {
			news = append(news, t)
		}
	}
	if len(news) > 0 {
		slices.SortFunc(news, func(a, b *Timer) int { return strings.Compare(a.T.Key, b.T.Key) })
		if err := tx.InsertTimers(ctx, news); err != nil {
			return err
		}
		for _, t := range news {
			bt.byID[t.T.ID] = t
		}
	}
	if len(rearmed) > 0 {
		if err := tx.RearmTimers(ctx, rearmed); err != nil {
			return err
		}
	}
	var fired, cancelled []int64
	for id, t := range bt.byID {
		if t.Exists && !t.armed && t.dirty {
			switch t.T.Status {
			case hourglass.TimerFired:
				fired = append(fired, id)
			case hourglass.TimerCancelled:
				cancelled = append(cancelled, id)
			}
		}
	}
	for _, set := range []struct {
		status hourglass.TimerStatus
		ids    []int64
	}{{hourglass.TimerFired, fired}, {hourglass.TimerCancelled, cancelled}} {
		if len(set.ids) > 0 {
			slices.Sort(set.ids)
			if err := tx.SetTimers(ctx, set.status, set.ids, now); err != nil {
				return err
			}
		}
	}
	return nil
}

// announced returns the timers armed by the batch that are still
// scheduled, once write gave them ids.
func (bt *timers) announced() []hourglass.DueItem {
	var out []hourglass.DueItem
	for _, t := range bt.armed {
		if t.T.Status == hourglass.TimerScheduled {
			out = append(out, hourglass.DueItem{ID: t.T.ID, At: t.T.FireAt})
		}
	}
	return out
}

// RunRequests runs the timer requests of p that run, in seq order, as one
// batch of ArmTimer's and CancelTimer's ops on tx (inside the requests'
// transaction), and settles each request with its op's answer. The batch
// decides its ops one after the other on the rows it read, so a key's
// second request sees its first (an arm then a cancel ends cancelled) and
// every timer row is written once.
func RunRequests(ctx context.Context, cfg Config, tx Tx, p plan.TimerRequests) (Outcome, error) {
	var (
		ops []*Op
		ran []*plan.TimerRequest // the request of each op
	)
	for _, r := range p {
		switch {
		case !r.Runs():
			continue
		case r.Arm != nil:
			ops = append(ops, &Op{Kind: Arm, Arm: *r.Arm})
		default:
			ops = append(ops, &Op{Kind: Cancel, Key: r.CancelKey})
		}
		ran = append(ran, r)
	}
	if len(ops) == 0 {
		return Outcome{}, nil
	}
	out, err := Run(ctx, cfg, tx, ops)
	if err != nil {
		return out, err
	}
	for i, r := range ran {
		if err := r.Settle(ops[i].Res.Timer, ops[i].Res.Err); err != nil {
			return out, err // the database's: the transaction rolls back
		}
	}
	return out, nil
}
