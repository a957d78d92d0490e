package sqlite

import "github.com/hourglass/hourglass/store/internal/sqlq"

// sinkHoldSQL is the condition PruneEvents adds for an event (e) of
// its DELETE (sqlq.SinkHold), ?1 the prune's before.
var sinkHoldSQL = sqlq.SinkHold("e", "?1")
