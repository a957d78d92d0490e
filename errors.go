package hourglass

import (
	"errors"
	"fmt"
)

// Code classifies an error for clients. The API maps each code to exactly one
// HTTP status in one table (api/errors.go).
type Code string

// Error codes. A retry is safe after CodeInternal and CodeUnavailable; the
// others describe the request or the order and will not change on retry
// (except insufficient_stock, which changes when stock does).
const (
	CodeInvalidArgument      Code = "invalid_argument"
	CodeUnauthorized         Code = "unauthorized"
	CodeForbidden            Code = "forbidden"
	CodeNotFound             Code = "not_found"
	CodeMethodNotAllowed     Code = "method_not_allowed"
	CodeInsufficientStock    Code = "insufficient_stock"
	CodeOrderNotPayable      Code = "order_not_payable"
	CodeInvalidTransition    Code = "invalid_transition"
	CodeIdempotencyKeyReused Code = "idempotency_key_reused"
	CodePayloadTooLarge      Code = "payload_too_large"
	CodeRequestTimeout       Code = "request_timeout"
	CodeLimitExceeded        Code = "limit_exceeded"
	CodeUnavailable          Code = "unavailable"
	CodeInternal             Code = "internal"
)

// Error is an error with a Code and a message fit to show a client.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Is makes errors.Is(err, ErrNotFound) match any *Error with the same code.
func (e *Error) Is(target error) bool {
	var t *Error
	if errors.As(target, &t) {
		return t.Code == e.Code
	}
	return false
}

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code Code, format string, args ...any) error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Sentinels for errors.Is; stores wrap or return *Error values with these codes.
var (
	ErrNotFound             = &Error{Code: CodeNotFound, Message: "not found"}
	ErrInsufficientStock    = &Error{Code: CodeInsufficientStock, Message: "insufficient stock"}
	ErrOrderNotPayable      = &Error{Code: CodeOrderNotPayable, Message: "order is not payable"}
	ErrInvalidTransition    = &Error{Code: CodeInvalidTransition, Message: "invalid transition"}
	ErrIdempotencyKeyReused = &Error{Code: CodeIdempotencyKeyReused, Message: "idempotency key reused with a different request"}
)

// ErrorCode returns the code of the first *Error in err's chain,
// CodeInternal for any other non-nil error, and "" for nil (no error).
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// ErrorMessage returns the client-facing message of err: the *Error's message
// or, for internal errors, a generic text (internal details go to the log).
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}
