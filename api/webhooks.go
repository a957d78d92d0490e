package api

// WebhookService is what the webhook and dead-letter routes need.
// (Filled in with the webhooks feature.)
type WebhookService interface{}

// webhookRoutes returns the /v1/webhooks and /v1/deadletters routes.
func (s *Server) webhookRoutes() []route { return nil }
