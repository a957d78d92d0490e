package testenv

import (
	"strings"
	"testing"
)

func TestPositiveInt(t *testing.T) {
	const name = "HOURGLASS_TEST_POSITIVE_INT"
	for _, tc := range []struct {
		value string
		want  int
		fails bool
	}{
		{value: "", want: 7},
		{value: "12", want: 12},
		{value: "0", fails: true},
		{value: "-3", fails: true},
		{value: "1e3", fails: true},
	} {
		t.Setenv(name, tc.value)
		f := &fatalTB{}
		got := -1
		done := make(chan struct{})
		go func() {
			defer close(done)
			got = PositiveInt(f, name, 7)
		}()
		<-done
		switch {
		case tc.fails && !strings.Contains(f.msg, name):
			t.Errorf("%q: failed with %q, want a message naming %s", tc.value, f.msg, name)
		case !tc.fails && (f.msg != "" || got != tc.want):
			t.Errorf("%q: got %d (failure %q), want %d", tc.value, got, f.msg, tc.want)
		}
	}
}
