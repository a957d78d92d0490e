package api

// OrderJSONOf exposes orderJSON to the external tests, which compare it with
// hourglass.MarshalOrder (the snapshot in webhook events).
var OrderJSONOf = orderJSON
