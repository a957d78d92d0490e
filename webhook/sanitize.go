package webhook

import (
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxErrorLen bounds, in bytes, the error text recorded for a failed
// attempt (AttemptResult.Error, a dead letter's LastError): the status, up
// to maxErrorBody bytes of the receiver's answer, or a transport error.
const MaxErrorLen = 1024

// SanitizeText returns s as text every store accepts and a reader can
// trust: valid UTF-8 (each run of invalid bytes becomes one U+FFFD, and an
// incomplete rune at the end, as a cut body leaves, is dropped), without
// NUL or any other control character but '\n' and '\t' (they are dropped:
// PostgreSQL refuses NUL in text, and the others would forge log lines or
// terminal output), and at most limit bytes long, cut at a rune boundary
// (limit <= 0: no bound). It looks at no more than 4·limit bytes of s (what
// lies beyond is dropped), so its cost is bounded by limit whatever s
// holds. It never fails and is safe for concurrent use.
func SanitizeText(s string, limit int) string {
	var b strings.Builder
	if limit > 0 {
		b.Grow(min(len(s), limit))
	}
	invalid := false // the previous byte was invalid: a run of them gives one U+FFFD
	end := len(s)
	if limit > 0 && end > 4*limit {
		end = 4 * limit
	}
	for i := 0; i < end; {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size <= 1 {
			if !utf8.FullRuneInString(s[i:]) {
				break // a rune cut by a read limit: nothing to show of it
			}
			i++
			if invalid {
				continue
			}
			invalid = true
		} else {
			invalid = false
			i += size
		}
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			continue
		}
		if limit > 0 && b.Len()+utf8.RuneLen(r) > limit {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

// decodeBody returns a receiver's answer as text: UTF-16 when it starts
// with a byte order mark (a common shape of error text from Windows
// servers, whose NULs PostgreSQL would refuse), else the bytes as they are;
// either way sanitised (SanitizeText) to at most limit bytes.
func decodeBody(body []byte, limit int) string {
	var order func(b []byte) uint16
	switch {
	case len(body) >= 2 && body[0] == 0xff && body[1] == 0xfe:
		order = func(b []byte) uint16 { return uint16(b[0]) | uint16(b[1])<<8 }
	case len(body) >= 2 && body[0] == 0xfe && body[1] == 0xff:
		order = func(b []byte) uint16 { return uint16(b[1]) | uint16(b[0])<<8 }
	default:
		return SanitizeText(string(body), limit)
	}
	units := make([]uint16, 0, (len(body)-2)/2)
	for i := 2; i+1 < len(body); i += 2 { // an odd last byte is half a unit: dropped
		units = append(units, order(body[i:]))
	}
	return SanitizeText(string(utf16.Decode(units)), limit)
}
