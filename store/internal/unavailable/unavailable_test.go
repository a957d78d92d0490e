package unavailable

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/hourglass/hourglass"
)

func TestError(t *testing.T) {
	t.Parallel()
	cause := errors.New("dial tcp 10.1.2.3:3306: connect: connection refused")
	err := error(New("write orders", cause))
	if hourglass.ErrorCode(err) != hourglass.CodeUnavailable || !errors.Is(err, &hourglass.Error{Code: hourglass.CodeUnavailable}) {
		t.Fatalf("code %s: want unavailable", hourglass.ErrorCode(err))
	}
	for _, shown := range []string{err.Error(), hourglass.ErrorMessage(err)} {
		if strings.Contains(shown, "10.1.2.3") || !strings.Contains(shown, Message) {
			t.Errorf("client sees %q: want %q and no driver text", shown, Message)
		}
	}
	if errors.Is(err, cause) {
		t.Error("the cause is in the Unwrap chain")
	}
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Warn("request failed", "err", err)
	if log := buf.String(); !strings.Contains(log, "10.1.2.3:3306") || !strings.Contains(log, "write orders") {
		t.Errorf("log line %q: want the operation and the driver's error", log)
	}
}
