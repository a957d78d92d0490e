package main

// webhookFlags are the webhook delivery settings. (Filled in with the
// webhooks feature.)
type webhookFlags struct{}
