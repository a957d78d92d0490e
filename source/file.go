package source

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

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
	BeforeClose            string   `yaml:"before_close"`
	BeforeCloseOnError     string   `yaml:"before_close_on_error"`
	BeforeCloseMaxFailures int      `yaml:"before_close_max_failures"`
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
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty: want a list under sources:")
		}
		// yaml's errors put each problem on a line of its own.
		return nil, errors.New(strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " "))
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
		out[i] = hourglass.Source{Name: s.Name, Table: s.Table, Key: s.Key, Deadline: s.Deadline, DeadlineUnit: s.DeadlineUnit,
			Pending: s.Pending, Close: s.Close, BeforeClose: s.BeforeClose, BeforeCloseOnError: s.BeforeCloseOnError,
			BeforeCloseMaxFailures: s.BeforeCloseMaxFailures}
	}
	if err := hourglass.ValidateSources(out); err != nil {
		return nil, err
	}
	return out, nil
}
