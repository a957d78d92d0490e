package api

import (
	"errors"
	"reflect"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/strictjson"
)

// Limits of a request body's JSON (strictjson's), checked before anything
// decodes it; beyond them the request is refused with invalid_argument.
const (
	MaxJSONDepth    = strictjson.MaxDepth
	MaxJSONKeys     = strictjson.MaxKeys
	MaxJSONElements = strictjson.MaxElements
)

// checkStrict is strictjson.Check with its refusal as an invalid_argument
// *hourglass.Error: the rules a body must keep before encoding/json
// decodes it into a value of type t.
func checkStrict(body []byte, t reflect.Type) error {
	return invalidArgument(strictjson.Check(body, t))
}

// invalidArgument turns a strictjson refusal into an invalid_argument
// *hourglass.Error with its message; other errors (none) pass as they are.
func invalidArgument(err error) error {
	var e *strictjson.Error
	if errors.As(err, &e) {
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "%s", e.Message)
	}
	return err
}
