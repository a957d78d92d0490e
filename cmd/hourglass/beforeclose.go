package main

import (
	"fmt"

	"github.com/hourglass/hourglass/beforeclose"
	"github.com/hourglass/hourglass/node"
)

// beforeCloseFlags configure the payment check before hourglass closes its
// own orders (node.BeforeClose).
type beforeCloseFlags struct {
	BeforeCloseURL         string `name:"before-close-url" help:"If set, before closing a due order hourglass POSTs {\"order\":{…}} here (2 s timeout) and closes, marks paid or extends it as the answer says ({\"action\":\"close\"}, {\"action\":\"paid\",\"payment_id\"}, {\"action\":\"extend\",\"deadline\"}); a failed check is retried and the order stays pending." env:"HOURGLASS_BEFORE_CLOSE_URL"`
	BeforeCloseSecret      string `name:"before-close-secret" help:"Signs each payment check like a webhook delivery (header Hourglass-Signature); empty: unsigned." env:"HOURGLASS_BEFORE_CLOSE_SECRET"`
	BeforeCloseOnError     string `name:"before-close-on-error" help:"What a failing payment check does: wait (the order stays pending, checked again with backoff up to 5 s apart) or close (closed after --before-close-max-failures failures in a row)." default:"wait" env:"HOURGLASS_BEFORE_CLOSE_ON_ERROR"`
	BeforeCloseMaxFailures int    `name:"before-close-max-failures" help:"With --before-close-on-error close, the failed checks in a row after which an order is closed anyway." default:"10" env:"HOURGLASS_BEFORE_CLOSE_MAX_FAILURES"`
}

// config returns the node.BeforeClose the flags describe, or a one-line
// error naming the flag to fix. sourcesAsk: a source of --sources has a
// before_close, which --before-close-secret signs too.
func (f *beforeCloseFlags) config(sourcesAsk bool) (node.BeforeClose, error) {
	c := node.BeforeClose{URL: f.BeforeCloseURL, Secret: f.BeforeCloseSecret, OnError: f.BeforeCloseOnError, MaxFailures: f.BeforeCloseMaxFailures}
	if f.BeforeCloseMaxFailures < 1 {
		return c, fmt.Errorf("--before-close-max-failures: must be at least 1, got %d", f.BeforeCloseMaxFailures)
	}
	if f.BeforeCloseURL == "" && f.BeforeCloseSecret != "" && !sourcesAsk {
		return c, fmt.Errorf("--before-close-secret is set without --before-close-url or a source with before_close")
	}
	if f.BeforeCloseOnError != beforeclose.OnErrorWait && f.BeforeCloseOnError != beforeclose.OnErrorClose {
		return c, fmt.Errorf("--before-close-on-error: %q is not wait or close", f.BeforeCloseOnError)
	}
	return c, c.Validate()
}
