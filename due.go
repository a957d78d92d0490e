package hourglass

import "context"

// DueUpdate is one announcement of a store's due-item feed (DueFeed): what
// committed writes changed in the set of due items (orders pending payment,
// scheduled timers), each an id and the time it falls due.
type DueUpdate struct {
	// Due are items now due at their Deadline: an order created pending, a
	// timer armed or re-armed (an item announced again with another time
	// is due at the later announcement's).
	Due []DueItem
	// Gone are ids no longer due: an order paid or cancelled, a timer
	// cancelled. Dropping their timers is an optimisation: a stale timer
	// closes nothing.
	Gone []int64
	// Reload means some announcements may have been missed (another
	// process's feed was interrupted): what is due must be read again from
	// the database.
	Reload bool
}

// Empty reports whether u announces nothing.
func (u DueUpdate) Empty() bool { return len(u.Due) == 0 && len(u.Gone) == 0 && !u.Reload }

// DueFeed is implemented by stores that announce every committed due item,
// whichever writer committed it (the API's writes, clients' timers, a
// writer added later), local and remote, through one subscription. The
// engine follows it; nothing else tells the engine what is due.
type DueFeed interface {
	// WatchDue registers fn and returns. From then until ctx ends, fn is
	// told each due item committed through this store value, after its
	// commit and before the write returns to its caller, and, on a store
	// shared by several processes (ClusterStore), those the others
	// committed within the store's announcement horizon, soon after their
	// commit, with Reload after that watch was interrupted (it restarts
	// by itself). fn may be called from several goroutines at once and must
	// not block long: it runs on the writers' path. wait blocks until fn
	// will not be called again.
	WatchDue(ctx context.Context, fn func(DueUpdate)) (wait func())
}
