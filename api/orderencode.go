package api

import (
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/hourglass/hourglass"
)

// orderAnswer is a route's answer of one order, as Order.View shows it:
// encodeValue writes it with appendOrder, without building an OrderJSON.
type orderAnswer hourglass.Order

// appendOrder appends o as marshalJSON writes orderJSON(o), byte for byte,
// without reflection and without formatting its times into strings of
// their own: the order is the answer of the hottest routes (create, get,
// pay) and the items of a list page. FuzzAppendOrder holds the two to the
// same bytes.
func appendOrder(b []byte, o *hourglass.Order) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, o.ID, 10)
	b = append(b, `,"user_id":`...)
	b = appendJSONString(b, o.UserID)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, string(o.Status))
	b = append(b, `,"items":[`...)
	for i, it := range o.Items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"sku":`...)
		b = appendJSONString(b, it.SKU)
		b = append(b, `,"quantity":`...)
		b = strconv.AppendInt(b, it.Quantity, 10)
		b = append(b, '}')
	}
	b = append(b, `],"created_at":`...)
	b = appendTime(b, o.CreatedAt)
	b = append(b, `,"deadline":`...)
	b = appendTime(b, o.Deadline)
	b = append(b, `,"paid_at":`...)
	b = appendOptTime(b, o.PaidAt)
	b = append(b, `,"closed_at":`...)
	b = appendOptTime(b, o.ClosedAt)
	b = append(b, `,"close_reason":`...)
	b = appendOptText(b, o.CloseReason)
	b = append(b, `,"payment_id":`...)
	b = appendOptText(b, o.PaymentID)
	return append(b, '}')
}

// appendTime appends t in TimeFormat as a JSON string (its bytes need no
// escaping).
func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, TimeFormat)
	return append(b, '"')
}

// appendOptTime is appendTime, or null for the zero time (formatTime).
func appendOptTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, "null"...)
	}
	return appendTime(b, t)
}

// appendOptText is appendJSONString, or null for "" (optString).
func appendOptText(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return appendJSONString(b, s)
}

// encodeValue encodes v as marshalJSON does, an orderAnswer with
// appendOrder.
func encodeValue(v any) ([]byte, error) {
	if o, ok := v.(orderAnswer); ok {
		return appendOrder(make([]byte, 0, 320+64*len(o.Items)), (*hourglass.Order)(&o)), nil
	}
	return marshalJSON(v)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string the way encoding/json does
// with HTML escaping off: " and \ escaped, control characters as \b \f \n
// \r \t or \u00XX, invalid UTF-8 as \ufffd, U+2028 and U+2029 as escapes
// (JavaScript reads them as line ends), everything else as it is.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
