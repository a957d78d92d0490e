package cliout_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/hourglass/hourglass/internal/cliout"
)

type item struct {
	ID   int    `json:"id"`
	Note string `json:"note"`
}

var cols = []cliout.Column[item]{
	{Header: "ID", Cell: func(i item) string { return string(rune('0' + i.ID)) }},
	{Header: "NOTE", Cell: func(i item) string { return i.Note }},
}

func write(t *testing.T, f cliout.Format, pages ...[]item) string {
	t.Helper()
	var b bytes.Buffer
	l := cliout.NewList(&b, f, cols)
	for _, p := range pages {
		l.Add(p...)
		if err := l.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestList: JSON is one array across pages ([] when empty), JSONL a line
// per item, a table one header, "-" for an empty cell and no control
// characters in a cell.
func TestList(t *testing.T) {
	pages := [][]item{{{1, "a"}, {2, ""}}, {{3, "line\nbreak\tand tab"}}}
	var got []item
	if out := write(t, cliout.JSON, pages...); json.Unmarshal([]byte(out), &got) != nil || len(got) != 3 || got[2].Note != "line\nbreak\tand tab" {
		t.Errorf("json: %s", out)
	}
	if out := write(t, cliout.JSON); strings.TrimSpace(out) != "[]" {
		t.Errorf("empty json: %q", out)
	}
	if out := write(t, cliout.JSONL, pages...); out != `{"id":1,"note":"a"}`+"\n"+`{"id":2,"note":""}`+"\n"+`{"id":3,"note":"line\nbreak\tand tab"}`+"\n" {
		t.Errorf("jsonl: %q", out)
	}
	if out := write(t, cliout.JSONL); out != "" {
		t.Errorf("empty jsonl: %q", out)
	}
	want := "ID  NOTE\n1   a\n2   -\n3   line break and tab\n"
	if out := write(t, cliout.Table, pages...); out != want {
		t.Errorf("table:\n%s\nwant:\n%s", out, want)
	}
	if out := write(t, cliout.Table); out != "ID  NOTE\n" {
		t.Errorf("empty table: %q", out)
	}
}

// TestWriteOne: an object in JSON, not an array.
func TestWriteOne(t *testing.T) {
	var b bytes.Buffer
	if err := cliout.WriteOne(&b, cliout.JSON, cols, item{7, "x"}); err != nil {
		t.Fatal(err)
	}
	var got item
	if err := json.Unmarshal(b.Bytes(), &got); err != nil || got != (item{7, "x"}) {
		t.Errorf("json: %s", b.String())
	}
	if got := cliout.Truncate("abcdef", 4); got != "abc…" {
		t.Errorf("Truncate: %q", got)
	}
}

// TestTableBatch: a table over many pages writes its rows once TableBatch
// are held, and stays aligned within the batch.
func TestTableBatch(t *testing.T) {
	var b bytes.Buffer
	l := cliout.NewList(&b, cliout.Table, cols)
	for i := range cliout.TableBatch - 1 {
		l.Add(item{i % 10, "x"})
		if err := l.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if b.Len() != 0 {
		t.Fatalf("written before a batch: %d bytes", b.Len())
	}
	l.Add(item{1, "long note"})
	if err := l.Flush(); err != nil || strings.Count(b.String(), "\n") != cliout.TableBatch+1 {
		t.Fatalf("one batch: %v, %d lines", err, strings.Count(b.String(), "\n"))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}
