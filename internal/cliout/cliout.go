// Package cliout writes the command line's answers in one of three formats:
// a table with aligned columns for people, one JSON document, or JSON lines
// for tools. A list is written as it arrives, page by page, so that following
// every page of a long list holds at most a page (JSON) or TableBatch rows
// (a table, whose columns are aligned within each batch) in memory, not the
// whole list.
package cliout

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Format is an output format: Table, JSON or JSONL.
type Format string

// The formats of -o.
const (
	// Table is aligned columns under a header line; an absent value is "-".
	Table Format = "table"
	// JSON is one document: the object of a get or an action, an array of
	// the items of a list (an empty list is []).
	JSON Format = "json"
	// JSONL is one object per line, for a get as for a list.
	JSONL Format = "jsonl"
)

// Formats lists the formats in the order the help gives them.
var Formats = []Format{Table, JSON, JSONL}

// TableBatch is how many rows a table holds before it writes them at the
// end of a page: columns are aligned across the rows of one batch.
const TableBatch = 1000

// Column is one column of a table: its header and its cell of an item.
type Column[T any] struct {
	Header string
	Cell   func(T) string
}

// List writes items of type T to w in format f. Add writes items; Flush
// ends a page (a table writes its rows in batches of TableBatch, aligned
// within each); Close ends the document (the header of an empty table, the
// "]" of a JSON array). WriteOne writes a single item as an object.
type List[T any] struct {
	w      io.Writer
	f      Format
	cols   []Column[T]
	single bool
	tw     *tabwriter.Writer
	held   int // table rows not yet written
	n      int
	err    error
}

// NewList returns a list writer; cols are used by Table only.
func NewList[T any](w io.Writer, f Format, cols []Column[T]) *List[T] {
	return &List[T]{w: w, f: f, cols: cols}
}

// WriteOne writes a single item: an object in JSON, one line in JSONL, a
// header and a row in a table.
func WriteOne[T any](w io.Writer, f Format, cols []Column[T], item T) error {
	l := &List[T]{w: w, f: f, cols: cols, single: true}
	l.Add(item)
	return l.Close()
}

// Add writes items.
func (l *List[T]) Add(items ...T) {
	for _, it := range items {
		if l.err != nil {
			return
		}
		switch l.f {
		case JSON:
			l.writeJSON(it)
		case JSONL:
			l.err = writeLine(l.w, it)
		default:
			l.row(it)
		}
		l.n++
	}
}

func (l *List[T]) writeJSON(it T) {
	b, err := json.MarshalIndent(it, indent(l.single), "  ")
	if err != nil {
		l.err = fmt.Errorf("encode: %w", err)
		return
	}
	switch {
	case l.single:
		_, l.err = fmt.Fprintf(l.w, "%s\n", b)
	case l.n == 0:
		_, l.err = fmt.Fprintf(l.w, "[\n  %s", b)
	default:
		_, l.err = fmt.Fprintf(l.w, ",\n  %s", b)
	}
}

func indent(single bool) string {
	if single {
		return ""
	}
	return "  "
}

func writeLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func (l *List[T]) row(it T) {
	l.header()
	cells := make([]string, len(l.cols))
	for i, c := range l.cols {
		cells[i] = cell(c.Cell(it))
	}
	_, l.err = fmt.Fprintln(l.tw, strings.Join(cells, "\t"))
	l.held++
}

func (l *List[T]) header() {
	if l.tw != nil {
		return
	}
	l.tw = tabwriter.NewWriter(l.w, 0, 0, 2, ' ', 0)
	names := make([]string, len(l.cols))
	for i, c := range l.cols {
		names[i] = c.Header
	}
	_, l.err = fmt.Fprintln(l.tw, strings.Join(names, "\t"))
}

// cell makes s one table cell: "-" when empty, control characters (tabs,
// newlines in an error message) as spaces.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

// Flush ends a page: a table holding TableBatch rows or more writes them.
func (l *List[T]) Flush() error {
	if l.held >= TableBatch {
		return l.flushTable()
	}
	return l.err
}

func (l *List[T]) flushTable() error {
	if l.err == nil && l.tw != nil {
		l.err = l.tw.Flush()
		l.held = 0
	}
	return l.err
}

// Close ends the document and returns the first error of any write.
func (l *List[T]) Close() error {
	if l.err != nil {
		return l.err
	}
	switch l.f {
	case JSON:
		if l.single {
			break
		}
		if l.n == 0 {
			_, l.err = fmt.Fprintln(l.w, "[]")
		} else {
			_, l.err = fmt.Fprintln(l.w, "\n]")
		}
	case JSONL:
	default:
		l.header()
		return l.flushTable()
	}
	return l.err
}

// Truncate shortens s to at most n runes, ending in "…" when cut.
func Truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:max(n-1, 0)]) + "…"
}

// Opt is *s, or "" for nil.
func Opt(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
