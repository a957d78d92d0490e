package mysql

import "github.com/hourglass/hourglass/store/internal/sqlq"

// sinkHoldSQL is the condition PruneEvents adds for an event (events) of
// its DELETE (sqlq.SinkHold), its one parameter the prune's before.
var sinkHoldSQL = sqlq.SinkHold("events", "?")
