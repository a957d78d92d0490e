package main

// alertFlags are the alerting settings. (Filled in with the alerts
// feature.)
type alertFlags struct{}
