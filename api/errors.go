package api

import (
	"net/http"

	"github.com/hourglass/hourglass"
)

// statusByCode is the one table mapping error codes to HTTP status codes.
var statusByCode = map[hourglass.Code]int{
	hourglass.CodeInvalidArgument:      http.StatusBadRequest,
	hourglass.CodeUnauthorized:         http.StatusUnauthorized,
	hourglass.CodeForbidden:            http.StatusForbidden,
	hourglass.CodeNotFound:             http.StatusNotFound,
	hourglass.CodeMethodNotAllowed:     http.StatusMethodNotAllowed,
	hourglass.CodeInsufficientStock:    http.StatusConflict,
	hourglass.CodeOrderNotPayable:      http.StatusConflict,
	hourglass.CodeInvalidTransition:    http.StatusConflict,
	hourglass.CodeIdempotencyKeyReused: http.StatusConflict,
	hourglass.CodePayloadTooLarge:      http.StatusRequestEntityTooLarge,
	hourglass.CodeRequestTimeout:       http.StatusRequestTimeout,
	hourglass.CodeLimitExceeded:        http.StatusConflict,
	hourglass.CodeTimerFired:           http.StatusConflict,
	hourglass.CodeTooManyBulkActions:   http.StatusTooManyRequests,
	hourglass.CodeBulkLeaseLost:        http.StatusConflict,
	hourglass.CodeUnavailable:          http.StatusServiceUnavailable,
	hourglass.CodeInternal:             http.StatusInternalServerError,
}

// StatusOf returns the HTTP status for an error code (500 for unknown codes).
func StatusOf(code hourglass.Code) int {
	if s, ok := statusByCode[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

type errorBody struct {
	Error errorJSON `json:"error"`
}

type errorJSON struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}
