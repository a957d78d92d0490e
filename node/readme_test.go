package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/engine"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/node"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/storetest"
)

// tourStep is one curl command of the README's tour and the answer the
// README shows under it ("# → 201 {…}; SKU: available 8, reserved 2").
type tourStep struct {
	line                 string
	method, path, body   string
	header               http.Header
	status               int               // 0: any 2xx
	fields               map[string]string // JSON values shown, as written
	stockSKU             string
	stock                map[string]int64
	deadlineLaterMinutes int // "its deadline N minutes later"
}

// TestReadmeTour runs the curl commands of README.md's tour, as written,
// against a node and checks each answer the README shows: the status, the
// fields of the JSON shown (a "…" value is not checked), the product's
// stock, a deadline moved by the minutes said. A GET is asked again until
// it shows what the README says, within 15 s: the tour's "5 s later".
// Each of the tour's orders is its own (the ids and stock would not add up
// otherwise). The commands are parsed from README.md, so the test breaks
// when the README drifts.
func TestReadmeTour(t *testing.T) {
	t.Parallel()
	steps := readTour(t, "../README.md")
	n, err := node.New(context.Background(), node.Config{
		Addr:     "127.0.0.1:0",
		Store:    store.Options{URL: storetest.URL(t)},
		Engine:   engine.Config{SweepInterval: 200 * time.Millisecond, SweepGrace: 200 * time.Millisecond},
		TimerMax: 1000,
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	node.RunInTest(t, n)
	base := "http://" + n.Addr().String()
	deadlines := map[float64]time.Time{} // by order id, as last answered
	for _, s := range steps {
		var status int
		var got map[string]any
		check := func() []string {
			status, got = call(t, base, s.method, s.path, s.header, s.body)
			return s.mismatches(t, base, status, got, deadlines)
		}
		problems := check()
		if s.method == http.MethodGet && len(problems) > 0 {
			testenv.EventuallyEvery(t, 15*time.Second, 50*time.Millisecond, s.line+": the answer the README shows", func() bool {
				problems = check()
				return len(problems) == 0
			})
		}
		if len(problems) > 0 {
			t.Fatalf("%s\n answered %d %v:\n %s", s.line, status, got, strings.Join(problems, "\n "))
		}
		if id, ok := got["id"].(float64); ok {
			if d, err := time.Parse(time.RFC3339Nano, fmt.Sprint(got["deadline"])); err == nil {
				deadlines[id] = d
			}
		}
	}
}

// mismatches returns how the answer (status, got) differs from what the
// README shows for s.
func (s tourStep) mismatches(t *testing.T, base string, status int, got map[string]any, deadlines map[float64]time.Time) []string {
	var out []string
	if (s.status == 0 && (status < 200 || status > 299)) || (s.status != 0 && status != s.status) {
		out = append(out, fmt.Sprintf("status %d, the README shows %d", status, s.status))
	}
	for k, raw := range s.fields {
		var want any
		if err := json.Unmarshal([]byte(raw), &want); err != nil {
			t.Fatalf("%s: the README's %q: %s is not JSON", s.line, k, raw)
		}
		if !reflect.DeepEqual(got[k], want) {
			out = append(out, fmt.Sprintf("%s is %v, the README shows %s", k, got[k], raw))
		}
	}
	if s.deadlineLaterMinutes != 0 {
		id, _ := got["id"].(float64)
		was, seen := deadlines[id]
		now, err := time.Parse(time.RFC3339Nano, fmt.Sprint(got["deadline"]))
		if !seen || err != nil || now.Sub(was) != time.Duration(s.deadlineLaterMinutes)*time.Minute {
			out = append(out, fmt.Sprintf("deadline %v, the README shows %d minutes after %v", got["deadline"], s.deadlineLaterMinutes, was))
		}
	}
	if s.stockSKU != "" {
		_, p := call(t, base, http.MethodGet, "/v1/products/"+s.stockSKU, nil, "")
		for k, want := range s.stock {
			if got, _ := p[k].(float64); int64(got) != want {
				out = append(out, fmt.Sprintf("%s %s is %v, the README shows %d", s.stockSKU, k, p[k], want))
			}
		}
	}
	return out
}

// call sends one request and returns its status and JSON object answer.
func call(t *testing.T, base, method, path string, header http.Header, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var got map[string]any
	if len(raw) > 0 && json.Unmarshal(raw, &got) != nil {
		t.Fatalf("%s %s: the answer %s is not a JSON object", method, path, raw)
	}
	return resp.StatusCode, got
}

var (
	tourAnswer   = regexp.MustCompile(`^# → (\d{3})(?: (\{.*?\}))?(.*)$`)
	tourField    = regexp.MustCompile(`"(\w+)":("(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?|true|false|null)`)
	tourStock    = regexp.MustCompile(`([A-Z0-9][A-Z0-9_-]*): ((?:(?:available|reserved|sold) \d+(?:, )?)+)`)
	tourQuantity = regexp.MustCompile(`(available|reserved|sold) (\d+)`)
	tourLater    = regexp.MustCompile(`deadline (\d+) minutes later`)
)

// readTour returns the steps of the first sh block under "## A tour" in
// the README at path.
func readTour(t *testing.T, path string) []tourStep {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, tour, ok := strings.Cut(string(b), "## A tour")
	_, block, ok2 := strings.Cut(tour, "```sh\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatalf("%s has no sh block under ## A tour", path)
	}
	block = strings.ReplaceAll(block, "\\\n", " ")
	var steps []tourStep
	for _, line := range strings.Split(block, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "curl "):
			steps = append(steps, parseCurl(t, line))
		case strings.HasPrefix(line, "# →"):
			if len(steps) == 0 {
				t.Fatalf("README: %q answers no command", line)
			}
			steps[len(steps)-1].expect(t, line)
		}
	}
	if len(steps) == 0 {
		t.Fatalf("%s: the tour has no curl command", path)
	}
	return steps
}

// expect reads the answer the README shows for s.
func (s *tourStep) expect(t *testing.T, line string) {
	m := tourAnswer.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("README: %q: want # → STATUS {json…}", line)
	}
	s.status, _ = strconv.Atoi(m[1])
	s.fields = map[string]string{}
	for _, f := range tourField.FindAllStringSubmatch(m[2], -1) {
		if !strings.Contains(f[2], "…") {
			s.fields[f[1]] = f[2]
		}
	}
	if st := tourStock.FindStringSubmatch(m[3]); st != nil {
		s.stockSKU, s.stock = st[1], map[string]int64{}
		for _, q := range tourQuantity.FindAllStringSubmatch(st[2], -1) {
			s.stock[q[1]], _ = strconv.ParseInt(q[2], 10, 64)
		}
	}
	if l := tourLater.FindStringSubmatch(m[3]); l != nil {
		s.deadlineLaterMinutes, _ = strconv.Atoi(l[1])
	}
}

// parseCurl reads a curl command as the README writes it: -X, -H, -d and
// one localhost:8080 URL; anything else fails the test, so that a new
// form in the README is taught here rather than skipped.
func parseCurl(t *testing.T, line string) tourStep {
	args := shellWords(t, line)
	s := tourStep{line: line, header: http.Header{}}
	for i := 1; i < len(args); i++ {
		a := args[i]
		next := func() string {
			if i+1 >= len(args) {
				t.Fatalf("README: %q: %s without a value", line, a)
			}
			i++
			return args[i]
		}
		switch {
		case a == "-X":
			s.method = next()
		case a == "-H":
			k, v, ok := strings.Cut(next(), ":")
			if !ok {
				t.Fatalf("README: %q: a header without ':'", line)
			}
			s.header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		case a == "-d":
			s.body = next()
			// curl's default for -d.
			s.header.Set("Content-Type", "application/x-www-form-urlencoded")
		case strings.HasPrefix(a, "localhost:8080/"):
			s.path = strings.TrimPrefix(a, "localhost:8080")
		default:
			t.Fatalf("README: %q: %q is not a curl argument this test knows", line, a)
		}
	}
	if s.path == "" {
		t.Fatalf("README: %q: no localhost:8080 URL", line)
	}
	if s.method == "" {
		s.method = http.MethodGet
		if s.body != "" {
			s.method = http.MethodPost
		}
	}
	return s
}

// shellWords splits a command line as sh does for the README's forms:
// words, 'single-quoted' and "double-quoted" strings, and a # comment.
func shellWords(t *testing.T, line string) []string {
	var (
		words  []string
		cur    strings.Builder
		inWord bool
	)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\'' || c == '"':
			end := strings.IndexByte(line[i+1:], c)
			if end < 0 {
				t.Fatalf("README: %q: an unclosed quote", line)
			}
			cur.WriteString(line[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '#' && !inWord:
			i = len(line)
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}
