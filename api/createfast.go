package api

import (
	"unicode/utf8"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/strictjson"
)

// createOrderFast is the one pass that decodes the usual POST /v1/orders
// body: an object of user_id, items (objects of exactly sku and quantity)
// and, optionally, timeout_ms and remind_before_ms, each key once,
// strings without escapes and of valid UTF-8, integers without sign
// tricks, fraction or exponent. It reads each byte once and allocates only
// the values it returns.
//
// ok is false for anything else, well-formed or not (an escape, a null, a
// key in another order of case, a duplicate, a number it does not take):
// the caller then runs the general path (strictjson's scan, then
// encoding/json), which accepts or refuses it with its message. So the fast
// path never accepts what the general one refuses, nor reads a body
// differently: FuzzCreateOrderFast checks exactly that.
func createOrderFast(b []byte) (fastOrder, bool) {
	var o fastOrder
	p := fastScanner{b: b}
	if !p.byte('{') || p.peek() == '}' { // {}: the general path says what is required
		return o, false
	}
	var haveUser, haveItems bool
	for {
		key, ok := p.str()
		if !ok || !p.byte(':') {
			return o, false
		}
		switch string(key) { // no allocation: the compiler compares in place
		case "user_id":
			s, ok := p.str()
			if !ok || haveUser {
				return o, false
			}
			o.userID, haveUser = string(s), true
		case "items":
			items, ok := p.items()
			if !ok || haveItems {
				return o, false
			}
			o.items, haveItems = items, true
		case "timeout_ms":
			ms, ok := p.int()
			if !ok || o.hasTimeout {
				return o, false
			}
			o.timeoutMs, o.hasTimeout = ms, true
		case "remind_before_ms":
			ms, ok := p.int()
			if !ok || o.hasRemind {
				return o, false
			}
			o.remindMs, o.hasRemind = ms, true
		default:
			return o, false
		}
		switch p.next() {
		case ',':
		case '}':
			return o, p.end() && haveUser && haveItems
		default:
			return o, false
		}
	}
}

// fastOrder is what createOrderFast read.
type fastOrder struct {
	userID     string
	items      []hourglass.Item
	timeoutMs  int64
	hasTimeout bool
	remindMs   int64
	hasRemind  bool
}

// fastScanner reads the JSON createOrderFast takes, failing (false) on
// anything else.
type fastScanner struct {
	b []byte
	i int
}

func (p *fastScanner) skip() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// peek returns the next byte after white space, or 0 at the end.
func (p *fastScanner) peek() byte {
	p.skip()
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

// next consumes and returns the next byte after white space (0 at the end).
func (p *fastScanner) next() byte {
	c := p.peek()
	if c != 0 {
		p.i++
	}
	return c
}

func (p *fastScanner) byte(c byte) bool { return p.next() == c }

// end reports whether only white space is left.
func (p *fastScanner) end() bool { p.skip(); return p.i == len(p.b) }

// str reads a string without escapes or control characters, of valid
// UTF-8, and returns its bytes (a slice of the body).
func (p *fastScanner) str() ([]byte, bool) {
	if !p.byte('"') {
		return nil, false
	}
	start := p.i
	ascii := true
	for ; p.i < len(p.b); p.i++ {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			if !ascii && !utf8.Valid(s) {
				return nil, false
			}
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

// int reads an integer as JSON writes it (no leading zero, no fraction or
// exponent), not -0, within int64.
func (p *fastScanner) int() (int64, bool) {
	p.skip()
	neg := p.i < len(p.b) && p.b[p.i] == '-'
	if neg {
		p.i++
	}
	start := p.i
	var n uint64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		if p.i-start >= 18 { // 18 digits always fit; more go the general way
			return 0, false
		}
		n = n*10 + uint64(p.b[p.i]-'0')
		p.i++
	}
	digits := p.i - start
	if digits == 0 || (digits > 1 && p.b[start] == '0') || (neg && n == 0) {
		return 0, false
	}
	if p.i < len(p.b) {
		if c := p.b[p.i]; c == '.' || c == 'e' || c == 'E' {
			return 0, false
		}
	}
	if neg {
		return -int64(n), true
	}
	return int64(n), true
}

// items reads [{"sku":…,"quantity":…},…]: each object's two keys once, in
// either order, at most strictjson.MaxElements objects.
func (p *fastScanner) items() ([]hourglass.Item, bool) {
	if !p.byte('[') {
		return nil, false
	}
	items := make([]hourglass.Item, 0, 4)
	if p.peek() == ']' {
		p.i++
		return items, true
	}
	for {
		if len(items) == strictjson.MaxElements || !p.byte('{') {
			return nil, false
		}
		var it hourglass.Item
		var haveSKU, haveQty bool
		for range 2 {
			key, ok := p.str()
			if !ok || !p.byte(':') {
				return nil, false
			}
			switch string(key) {
			case "sku":
				s, ok := p.str()
				if !ok || haveSKU {
					return nil, false
				}
				it.SKU, haveSKU = string(s), true
			case "quantity":
				q, ok := p.int()
				if !ok || haveQty {
					return nil, false
				}
				it.Quantity, haveQty = q, true
			default:
				return nil, false
			}
			if !haveSKU || !haveQty {
				if !p.byte(',') {
					return nil, false
				}
			}
		}
		if !p.byte('}') {
			return nil, false
		}
		items = append(items, it)
		switch p.next() {
		case ',':
		case ']':
			return items, true
		default:
			return nil, false
		}
	}
}
