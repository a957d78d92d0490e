package hourglass

import (
	"fmt"
	"unicode/utf8"
)

// Text every store keeps: valid UTF-8 without NUL (U+0000). PostgreSQL
// refuses both in text and jsonb columns, so a string outside it would be a
// 500 on one store and stored on another; refusing it where it comes in
// makes every store answer alike. The API checks every string of a request
// body (and the Idempotency-Key header) before decoding it; the domain's
// validators check it again for callers that bypass the API.

// TextProblem returns what keeps s from being text every store keeps ("" when
// nothing does): "a NUL (U+0000) at byte N" or "invalid UTF-8 at byte N",
// for the first offending byte (bytes count from 1). It is linear in len(s)
// and allocates only for its answer.
func TextProblem(s string) string {
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == 0:
			return fmt.Sprintf("a NUL (U+0000) at byte %d", i+1)
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				return fmt.Sprintf("invalid UTF-8 at byte %d", i+1)
			}
			i += size
		}
	}
	return ""
}

// CheckText returns an invalid_argument *Error naming field when s is not
// valid UTF-8 without NUL (TextProblem), else nil.
func CheckText(field, s string) error {
	if p := TextProblem(s); p != "" {
		return Errorf(CodeInvalidArgument, "%s: must be valid UTF-8 without NUL (U+0000), got %s", field, p)
	}
	return nil
}
