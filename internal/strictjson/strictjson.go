// Package strictjson checks JSON text before encoding/json decodes it, for
// what the decoder would accept although hourglass refuses it (duplicate
// keys, NUL, unpaired surrogates, -0, case-folded field names) and for the
// limits that bound the work one text can cost. The API checks every
// request body with it, and the root package a timer's payload however it
// came (PUT /v1/timers/{key} or a shop's timer_requests row): one scanner,
// one set of rules. It imports only the standard library.
package strictjson

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// Limits of a JSON text, checked by Check before anything decodes it;
// beyond them the text is refused. They bound the work one text can cause:
// encoding/json would accept 10,000 levels of nesting, and any number of
// keys or elements, each one costing allocations when decoded.
const (
	// MaxDepth is how many arrays and objects may nest inside each
	// other, the outermost included.
	MaxDepth = 64
	// MaxKeys is the most keys one object may have (a policy has at
	// most 1,000 categories).
	MaxKeys = 1000
	// MaxElements is the most elements an array decoded into a list
	// (items, events) may have. Arrays inside free-form JSON (a timer's
	// payload) are bounded by its size alone: they are kept as bytes,
	// never decoded element by element.
	MaxElements = 1000
)

// smallObject is how many keys an object may have before its duplicate check
// uses a map rather than comparing each new key with the earlier ones: up to
// it, the comparisons are cheaper than the map; beyond it, they would be
// quadratic.
const smallObject = 8

// Error is a refusal: Message names the field by its path (items[0].sku,
// payload.a.b) and says what is wrong.
type Error struct{ Message string }

func (e *Error) Error() string { return e.Message }

func errorf(format string, args ...any) error {
	return &Error{Message: fmt.Sprintf(format, args...)}
}

// Stats is what a scan cost: Work counts its steps beyond reading each
// byte once (key comparisons and lookups, in bytes), Depth the most arrays
// and objects it had open at once. Fuzz targets check that Work stays
// within a small multiple of the text's length.
type Stats struct{ Work, Depth int }

// Check refuses, before encoding/json decodes body into a value of type t
// (nil, or json.RawMessage: free-form JSON), what the decoder would accept
// although hourglass refuses it, and what would cost more to decode than a
// text should:
//   - a key that names a field only when case is ignored ({"AVAILABLE":7});
//   - a key given twice in one object (where the last would win);
//   - the number -0;
//   - a string (value or key) that is not valid UTF-8, or holds a NUL
//     (raw or \u0000) or an unpaired UTF-16 surrogate escape (\ud800): no
//     store could keep it alike (hourglass.TextProblem);
//   - nesting deeper than MaxDepth, an object of more than MaxKeys
//     keys, a list of more than MaxElements elements.
//
// Each error is an *Error naming the field by its path. Anything else
// wrong (syntax, unknown fields, types) is left to the decoder, which
// reports it: Check answers nil for a text that is not JSON, and a caller
// that decodes nothing runs json.Valid too (Object does).
//
// The scan is iterative, with its stack bounded by MaxDepth, and its
// work linear in len(body): each byte is read once, a key is compared with
// at most smallObject others or looked up in its object's map, and paths
// are built only for errors. It allocates nothing for ordinary texts. It
// is safe for concurrent use.
func Check(body []byte, t reflect.Type) error {
	_, err := Scan(body, t)
	return err
}

// Scan is Check, reporting what the scan cost.
func Scan(body []byte, t reflect.Type) (Stats, error) {
	var (
		frames [8]frame
		keys   [16][]byte
	)
	sc := strictScanner{b: body, stack: frames[:0], keys: keys[:0]}
	err := sc.scan(t)
	return Stats{Work: sc.work, Depth: sc.depth}, err
}

// Object checks free-form JSON that must be one object, as a timer's
// payload: Check's rules, then json.Valid, then that it is an object.
// Errors are *Error values naming the text as what.
func Object(what string, b []byte) error {
	if err := Check(b, nil); err != nil {
		var e *Error
		if errors.As(err, &e) {
			// Paths start at the text's name (payload.a.b), not at "body".
			if rest, ok := strings.CutPrefix(e.Message, "body"); ok {
				e.Message = what + rest
			} else {
				e.Message = what + "." + e.Message
			}
		}
		return err
	}
	if !json.Valid(b) {
		return errorf("%s: must be a JSON object (not valid JSON)", what)
	}
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return errorf("%s: must be a JSON object", what)
	}
	return nil
}

// strictScanner walks JSON bytes. On anything it does not expect it stops
// with stop set and no error: the decoder reports the syntax error.
type strictScanner struct {
	b     []byte
	i     int
	stop  bool
	stack []frame  // the open arrays and objects, outermost first
	keys  [][]byte // the keys of the open objects, each frame's from its keysFrom
	// work counts the scan's steps beyond reading each byte once: key
	// comparisons and lookups, in bytes (Stats.Work).
	work  int
	depth int // the most frames open at once (Stats.Depth)
}

// frame is an open array or object.
type frame struct {
	obj    bool
	typ    reflect.Type // its Go type; nil when free-form (a payload) or unknown
	fields []jsonField  // typ's fields, when a struct
	// member is the key of the object's current member; index is the
	// array's current element, or the number of keys the object has had.
	member   []byte
	index    int
	keysFrom int                 // the object's keys start at sc.keys[keysFrom]
	seen     map[string]struct{} // its keys once it has more than smallObject
}

// rawMessage is the type of a timer's payload: free-form JSON, checked only
// for the limits and text.
var rawMessage = reflect.TypeFor[json.RawMessage]()

func (sc *strictScanner) scan(t reflect.Type) error {
	want := t
	for {
		// A value of Go type want begins here.
		opened, err := sc.value(want)
		if err != nil || sc.stop {
			return err
		}
		// Move to the next value: the first member of what just opened, or
		// the next member of the innermost open container, closing those
		// that end on the way.
		first := opened
		for {
			if len(sc.stack) == 0 {
				return nil // trailing data is the decoder's to report
			}
			f := &sc.stack[len(sc.stack)-1]
			sc.ws()
			if sc.i >= len(sc.b) {
				sc.stop = true
				return nil
			}
			closer := byte(']')
			if f.obj {
				closer = '}'
			}
			if c := sc.b[sc.i]; c == closer {
				sc.i++
				sc.pop()
				first = false
				continue
			} else if !first {
				if c != ',' {
					sc.stop = true
					return nil
				}
				sc.i++
			}
			if f.obj {
				want, err = sc.key(f)
			} else {
				want, err = sc.element(f, first)
			}
			if err != nil || sc.stop {
				return err
			}
			break
		}
	}
}

func (sc *strictScanner) pop() {
	sc.keys = sc.keys[:sc.stack[len(sc.stack)-1].keysFrom]
	sc.stack = sc.stack[:len(sc.stack)-1]
}

func (sc *strictScanner) ws() {
	for sc.i < len(sc.b) {
		switch sc.b[sc.i] {
		case ' ', '\t', '\n', '\r':
			sc.i++
		default:
			return
		}
	}
}

// value scans a value of Go type t. An array or object is only opened
// (pushed, its bracket read): opened reports it.
func (sc *strictScanner) value(t reflect.Type) (opened bool, err error) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == rawMessage {
		t = nil
	}
	sc.ws()
	if sc.i >= len(sc.b) {
		sc.stop = true
		return false, nil
	}
	switch c := sc.b[sc.i]; {
	case c == '{' || c == '[':
		if len(sc.stack) >= MaxDepth {
			return false, errorf("%s: JSON nested more than %d levels deep (arrays and objects inside each other)", sc.path(true), MaxDepth)
		}
		f := frame{obj: c == '{', keysFrom: len(sc.keys)}
		if t != nil {
			switch k := t.Kind(); {
			case f.obj && k == reflect.Struct:
				f.typ, f.fields = t, structFields(t)
			case f.obj && k == reflect.Map, !f.obj && (k == reflect.Slice || k == reflect.Array):
				f.typ = t
			}
		}
		sc.stack = append(sc.stack, f)
		sc.depth = max(sc.depth, len(sc.stack))
		sc.i++
		return true, nil
	case c == '"':
		if _, _, bad := sc.str(); bad != "" {
			return false, textError(sc.path(true)+":", bad)
		}
	case c == '-' || c >= '0' && c <= '9':
		start := sc.i
		// Negative zero: digits before the exponent, all of them 0.
		zero, digits := true, false
	number:
		for exp := false; sc.i < len(sc.b); sc.i++ {
			switch d := sc.b[sc.i]; {
			case d == 'e' || d == 'E':
				exp = true
			case d >= '0' && d <= '9':
				if !exp {
					digits = true
					zero = zero && d == '0'
				}
			case d == '.' || d == '+' || d == '-':
			default:
				break number
			}
		}
		if c == '-' && zero && digits {
			return false, errorf("%s: %s is not a valid value (negative zero)", sc.path(true), shorten(sc.b[start:sc.i]))
		}
	default: // true, false, null, or junk for the decoder
		start := sc.i
		for sc.i < len(sc.b) && sc.b[sc.i] >= 'a' && sc.b[sc.i] <= 'z' {
			sc.i++
		}
		if sc.i == start {
			sc.stop = true
		}
	}
	return false, nil
}

// element moves to the next element of the array f (its first when first),
// and returns the element's Go type.
func (sc *strictScanner) element(f *frame, first bool) (reflect.Type, error) {
	if !first {
		f.index++
	}
	if f.typ == nil {
		return nil, nil
	}
	if f.index >= MaxElements {
		return nil, errorf("%s: more than %d elements", sc.path(false), MaxElements)
	}
	return f.typ.Elem(), nil
}

// key reads the next key of the object f and its colon, checks it, and
// returns the Go type of its value.
func (sc *strictScanner) key(f *frame) (reflect.Type, error) {
	sc.ws()
	if sc.i >= len(sc.b) || sc.b[sc.i] != '"' {
		sc.stop = true
		return nil, nil
	}
	start := sc.i
	raw, escaped, bad := sc.str()
	if bad != "" {
		return nil, textError(sc.path(false)+": a key", bad)
	}
	if sc.stop {
		return nil, nil
	}
	key := raw
	if escaped {
		if key = unescape(sc.b[start+1 : sc.i-1]); key == nil {
			sc.stop = true
			return nil, nil
		}
	}
	if f.index++; f.index > MaxKeys {
		return nil, errorf("%s: more than %d keys in one object", sc.path(false), MaxKeys)
	}
	f.member = key
	if sc.seenBefore(f, key) {
		return nil, errorf("%s: given more than once", sc.path(true))
	}
	var ft reflect.Type
	switch {
	case f.typ != nil && f.typ.Kind() == reflect.Struct: // fields may be none
		sc.work += len(f.fields) * (len(key) + 1)
		field, exact := lookupField(f.fields, key)
		if field != nil && !exact {
			return nil, errorf("unknown field %q (field names are case-sensitive: did you mean %q?)", sc.path(true), field.name)
		}
		if field != nil {
			ft = field.typ
		}
	case f.typ != nil: // a map
		ft = f.typ.Elem()
	}
	sc.ws()
	if sc.i >= len(sc.b) || sc.b[sc.i] != ':' {
		sc.stop = true
		return nil, nil
	}
	sc.i++
	return ft, nil
}

// seenBefore reports whether the object f had key already, and records it.
// Up to smallObject keys it compares key with each earlier one; beyond, it
// moves them into a map, so an object of n keys costs O(n), not O(n²).
func (sc *strictScanner) seenBefore(f *frame, key []byte) bool {
	if f.seen != nil {
		sc.work += len(key) + 1
		if _, dup := f.seen[string(key)]; dup {
			return true
		}
		f.seen[string(key)] = struct{}{}
		return false
	}
	own := sc.keys[f.keysFrom:]
	for _, k := range own {
		sc.work += len(key) + 1
		if bytes.Equal(k, key) {
			return true
		}
	}
	if len(own) < smallObject {
		sc.keys = append(sc.keys, key)
		return false
	}
	f.seen = make(map[string]struct{}, 2*smallObject)
	for _, k := range own {
		sc.work += len(k) + 1
		f.seen[string(k)] = struct{}{}
	}
	f.seen[string(key)] = struct{}{}
	return false
}

// str scans the string whose quote is at sc.i and returns its raw contents
// (escapes as written) and whether it has escapes. bad, when not "", says why
// its text is not text every store keeps (a NUL, invalid UTF-8, an unpaired
// surrogate escape); the scan stops there. A string that is malformed
// otherwise (a bad escape, a control character, no closing quote) sets stop.
func (sc *strictScanner) str() (raw []byte, escaped bool, bad string) {
	b := sc.b
	for j := sc.i + 1; j < len(b); {
		switch c := b[j]; {
		case c == '"':
			raw = b[sc.i+1 : j]
			sc.i = j + 1
			return raw, escaped, ""
		case c == '\\':
			escaped = true
			if j+1 < len(b) && b[j+1] != 'u' {
				j += 2
				continue
			}
			r, ok := hex4(b, j+2)
			if !ok {
				sc.stop = true
				return nil, false, ""
			}
			j += 6
			switch {
			case r == 0:
				return nil, false, "a NUL (\\u0000)"
			case utf16.IsSurrogate(r):
				if r2, ok := hex4(b, j+2); r < 0xdc00 && ok && b[j] == '\\' && b[j+1] == 'u' && r2 >= 0xdc00 && r2 < 0xe000 {
					j += 6
					continue
				}
				return nil, false, "an unpaired UTF-16 surrogate (\\u" + string(b[j-4:j]) + ")"
			}
		case c == 0:
			return nil, false, "a NUL byte"
		case c < 0x20:
			sc.stop = true // a control character: the decoder says where
			return nil, false, ""
		case c < utf8.RuneSelf:
			j++
		default:
			r, size := utf8.DecodeRune(b[j:])
			if r == utf8.RuneError && size == 1 {
				return nil, false, "invalid UTF-8"
			}
			j += size
		}
	}
	sc.stop = true
	return nil, false, ""
}

// hex4 reads the 4 hex digits at b[i:], as a \u escape has them.
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// unescape decodes the escapes of a JSON string's contents raw, which str
// scanned (so its \u escapes are well formed and paired), or returns nil
// for an unknown escape. The result is never longer than raw.
func unescape(raw []byte) []byte {
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			out = append(out, raw[i])
			continue
		}
		i++
		if i >= len(raw) {
			return nil
		}
		switch raw[i] {
		case '"', '\\', '/':
			out = append(out, raw[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(raw, i+1)
			if !ok {
				return nil
			}
			i += 4
			if utf16.IsSurrogate(r) {
				r2, ok := hex4(raw, i+3)
				if !ok {
					return nil
				}
				r = utf16.DecodeRune(r, r2)
				i += 6
			}
			out = utf8.AppendRune(out, r)
		default:
			return nil
		}
	}
	return out
}

// textError is the invalid_argument error of a string that is not text
// every store keeps: what names it (its path, or "path: a key"), and why.
func textError(what, bad string) error {
	return errorf("%s must be valid UTF-8 without NUL (U+0000), got %s", what, bad)
}

// maxPathKey is the most bytes of a key a path shows: a key may be as long
// as the body, and an error message need not be.
const maxPathKey = 64

// path names the current position for an error: each open container's
// current member, as in items[0].sku; without the innermost one's unless
// member. A path that would be empty, or start with an index, starts with
// "body".
func (sc *strictScanner) path(member bool) string {
	var p strings.Builder
	for n, f := range sc.stack {
		if n == len(sc.stack)-1 && !member {
			break
		}
		if !f.obj {
			if p.Len() == 0 {
				p.WriteString("body")
			}
			p.WriteByte('[')
			p.WriteString(itoa(f.index))
			p.WriteByte(']')
			continue
		}
		if p.Len() > 0 {
			p.WriteByte('.')
		}
		p.Write(shorten(f.member))
	}
	if p.Len() == 0 {
		return "body"
	}
	return p.String()
}

// shorten returns b, or its first maxPathKey bytes (whole characters)
// followed by "…".
func shorten(b []byte) []byte {
	if len(b) <= maxPathKey {
		return b
	}
	n := maxPathKey
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return append(b[:n:n], "…"...)
}

func itoa(n int) string {
	var buf [20]byte
	i := len(buf)
	for {
		i--
		buf[i] = byte('0' + n%10)
		if n /= 10; n == 0 {
			return string(buf[i:])
		}
	}
}

// jsonField is a struct field's JSON name and Go type.
type jsonField struct {
	name  string
	nameB []byte // name, for comparisons with keys that allocate nothing
	typ   reflect.Type
}

// fieldCache holds structFields per type: the request types are few and
// fixed, and reflection per request would cost allocations.
var fieldCache sync.Map // reflect.Type → []jsonField

func structFields(t reflect.Type) []jsonField {
	if f, ok := fieldCache.Load(t); ok {
		return f.([]jsonField)
	}
	var fields []jsonField
	for i := range t.NumField() {
		sf := t.Field(i)
		tag, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if tag == "-" || !sf.IsExported() {
			continue
		}
		name := cmp.Or(tag, sf.Name)
		fields = append(fields, jsonField{name: name, nameB: []byte(name), typ: sf.Type})
	}
	fieldCache.Store(t, fields)
	return fields
}

// lookupField finds the field key names: exactly, or only when case is
// ignored (exact false: the name it should have been).
func lookupField(fields []jsonField, key []byte) (f *jsonField, exact bool) {
	for i := range fields {
		if fields[i].name == string(key) {
			return &fields[i], true
		}
	}
	for i := range fields {
		if bytes.EqualFold(fields[i].nameB, key) {
			return &fields[i], false
		}
	}
	return nil, false
}
