// Package unavailable is the one error every store returns when its
// database cannot be reached or cannot make a write durable: the client is
// told Message, never the driver's text (which names the database's address,
// its user, sometimes a query), and the cause goes to the logs. It imports
// only the root package and the standard library.
package unavailable

import (
	"log/slog"

	"github.com/hourglass/hourglass"
)

// Message is the client-facing message of every store's unavailable error.
const Message = "database unavailable: retry later"

// Error is an unavailable *hourglass.Error (its code and Message, as
// errors.As and hourglass.ErrorCode see it) that keeps the operation and the
// driver's error for the logs: slog shows them (LogValue), while Error and
// hourglass.ErrorMessage show only Message. The cause is deliberately not in
// the Unwrap chain, so no caller formats it into an answer by accident.
type Error struct {
	// Op is what the store was doing ("write orders").
	Op string
	// Cause is the driver's error, already stripped of any password.
	Cause  error
	public *hourglass.Error
}

// New returns the unavailable error of operation op, caused by cause.
func New(op string, cause error) *Error {
	return &Error{Op: op, Cause: cause, public: &hourglass.Error{Code: hourglass.CodeUnavailable, Message: Message}}
}

// Error returns the client-facing text: the code and Message.
func (e *Error) Error() string { return e.public.Error() }

// Unwrap returns the *hourglass.Error the client sees.
func (e *Error) Unwrap() error { return e.public }

// LogValue is what a log line holding the error shows: the message, the
// operation and the driver's error.
func (e *Error) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("msg", Message), slog.String("op", e.Op)}
	if e.Cause != nil {
		attrs = append(attrs, slog.String("cause", e.Cause.Error()))
	}
	return slog.GroupValue(attrs...)
}
