package source

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hourglass/hourglass"
)

// maxFile bounds a --sources file.
const maxFile = 1 << 20

// fileSource is one entry of a --sources file: exactly these keys.
type fileSource struct {
	Name                   string   `yaml:"name"`
	Table                  string   `yaml:"table"`
	Key                    string   `yaml:"key"`
	Deadline               string   `yaml:"deadline"`
	DeadlineUnit           string   `yaml:"deadline_unit"`
	Pending                string   `yaml:"pending"`
	Close                  []string `yaml:"close"`
	Lock                   []string `yaml:"lock"`
	BeforeClose            string   `yaml:"before_close"`
	BeforeCloseOnError     string   `yaml:"before_close_on_error"`
	BeforeCloseMaxFailures int      `yaml:"before_close_max_failures"`
	// RemindBefore is a Go duration ("10m", "90s"); "" or absent: none.
	RemindBefore string `yaml:"remind_before"`
}

// Load reads a --sources file (YAML: a list under "sources") and validates
// it. An unknown key, a missing one or a bad value is an error naming the
// file, the source and the key.
func Load(path string) ([]hourglass.Source, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--sources: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return nil, fmt.Errorf("--sources %s: %w", path, err)
	}
	if len(b) > maxFile {
		return nil, fmt.Errorf("--sources %s: larger than %d bytes", path, maxFile)
	}
	srcs, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("--sources %s: %w", path, err)
	}
	return srcs, nil
}

// Parse reads the YAML of a --sources file and validates it.
func Parse(b []byte) ([]hourglass.Source, error) {
	var doc struct {
		Sources []fileSource `yaml:"sources"`
	}
	var root yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(b)).Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty: want a list under sources:")
		}
		return nil, oneLine(err)
	}
	// The keys are checked on the document as written, so that a typo
	// reads as the user's key, not as a Go type's field.
	fields, err := checkKeys(&root)
	if err != nil {
		return nil, err
	}
	if err := root.Decode(&doc); err != nil {
		return nil, typeError(err, fields)
	}
	if len(doc.Sources) == 0 {
		return nil, errors.New("no sources: want a list under sources:")
	}
	out := make([]hourglass.Source, len(doc.Sources))
	for i, s := range doc.Sources {
		for _, req := range []struct{ key, v string }{{"name", s.Name}, {"table", s.Table}, {"key", s.Key}, {"deadline", s.Deadline}, {"pending", s.Pending}} {
			if req.v == "" {
				return nil, fmt.Errorf("sources[%d] (%s): %s is required", i, s.Name, req.key)
			}
		}
		var lead time.Duration
		if s.RemindBefore != "" {
			d, err := time.ParseDuration(s.RemindBefore)
			if err != nil {
				return nil, fmt.Errorf("source %s: remind_before: %q is not a duration; want one such as 10m or 90s (0 for none)", cmp.Or(s.Name, "(unnamed)"), s.RemindBefore)
			}
			lead = d
		}
		out[i] = hourglass.Source{Name: s.Name, Table: s.Table, Key: s.Key, Deadline: s.Deadline, DeadlineUnit: s.DeadlineUnit,
			Pending: s.Pending, Close: s.Close, Lock: s.Lock, BeforeClose: s.BeforeClose, BeforeCloseOnError: s.BeforeCloseOnError,
			BeforeCloseMaxFailures: s.BeforeCloseMaxFailures, RemindBefore: lead}
	}
	if err := hourglass.ValidateSources(out); err != nil {
		return nil, err
	}
	return out, nil
}

// oneLine joins yaml's errors, which put each problem on a line of its own.
func oneLine(err error) error {
	return errors.New(strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " "))
}

// sourceKeys returns the keys a source may have, fileSource's yaml tags.
func sourceKeys() []string {
	t := reflect.TypeFor[fileSource]()
	keys := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		keys = append(keys, name)
	}
	return keys
}

// checkKeys returns an error naming the first key of the document root
// that is not sources: or a source's (with the key meant, when a typo is
// close to one), or the field each value's line holds ("sources[0].close"
// by line), for typeError.
func checkKeys(root *yaml.Node) (map[int]string, error) {
	fields := map[int]string{}
	if root.Kind != yaml.DocumentNode || len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return fields, errors.New("want a mapping with a list under sources:")
	}
	top := root.Content[0]
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		if k.Value != "sources" {
			return fields, fmt.Errorf("line %d: unknown key %q%s: the file holds only a list under sources:", k.Line, k.Value, meant(k.Value, []string{"sources"}))
		}
		if v.Kind != yaml.SequenceNode {
			continue // Decode says what it wants
		}
		keys := sourceKeys()
		for n, item := range v.Content {
			if item.Kind != yaml.MappingNode {
				fields[item.Line] = fmt.Sprintf("sources[%d]", n)
				continue
			}
			for j := 0; j+1 < len(item.Content); j += 2 {
				key, val := item.Content[j], item.Content[j+1]
				if !slices.Contains(keys, key.Value) {
					return fields, fmt.Errorf("line %d: sources[%d]: unknown key %q%s; a source's keys are %s", key.Line, n, key.Value, meant(key.Value, keys), strings.Join(keys, ", "))
				}
				fields[val.Line] = fmt.Sprintf("sources[%d].%s", n, key.Value)
				for _, c := range val.Content {
					fields[c.Line] = fmt.Sprintf("sources[%d].%s", n, key.Value)
				}
			}
		}
	}
	return fields, nil
}

// meant returns ` (did you mean "x"?)` for the known key within two edits
// of key, if any.
func meant(key string, known []string) string {
	for _, k := range known {
		if editDistance(key, k) <= 2 {
			return fmt.Sprintf(" (did you mean %q?)", k)
		}
	}
	return ""
}

// editDistance is the Levenshtein distance of two short keys.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// typeLine is one of yaml's type errors: "line 7: cannot unmarshal !!str
// `abc` into int".
var typeLine = regexp.MustCompile("^line (\\d+): cannot unmarshal !!(\\w+) (`[^`]*` )?into (.+)$")

// typeError rewrites yaml's type errors in the terms of the file: the
// field by its line (fields) and what it wants, never a Go type.
func typeError(err error, fields map[int]string) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return oneLine(err)
	}
	msgs := make([]string, len(te.Errors))
	for i, e := range te.Errors {
		m := typeLine.FindStringSubmatch(e)
		if m == nil {
			msgs[i] = e
			continue
		}
		line, _ := strconv.Atoi(m[1])
		field := cmp.Or(fields[line], "the value")
		want := map[string]string{"int": "a whole number", "string": "a string (quote it)", "[]string": "a list of SQL statements (- \"UPDATE …\")"}[m[4]]
		if strings.HasPrefix(m[4], "[]source.") {
			field, want = "sources", "a list of sources (- name: …)"
		}
		got := map[string]string{"str": "text", "int": "a number", "map": "a mapping", "seq": "a list", "bool": "true/false", "float": "a number", "null": "nothing"}[m[2]]
		msgs[i] = fmt.Sprintf("line %d: %s: want %s, got %s %s", line, field, cmp.Or(want, "another kind of value"), cmp.Or(got, m[2]), strings.TrimSpace(m[3]))
	}
	return errors.New(strings.TrimSpace(strings.Join(msgs, "; ")))
}
