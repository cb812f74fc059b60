package msgs

import (
	"errors"
	"fmt"
	"strconv"
)

// FieldError is the error of every decode and validation failure. The node
// turns it into an Error reply with ErrorReply.
type FieldError struct {
	// Path names the offending field, for example "frames[3].width" or
	// "ego_history[2].xyz[1]"; it is empty when the message as a whole is
	// at fault (malformed msgpack, not a map).
	Path string
	// Msg says what is wrong, for example "want integer, got string".
	Msg string
	// Code is the Error code the failure earns: CodeBadRequest, or
	// CodeUnsupported for a protocol version this package does not speak.
	Code Code
}

// Error returns "path: msg", or msg alone when the path is empty.
func (e *FieldError) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

// ErrorReply returns the Error reply for a request whose handling failed with
// err: a *FieldError (possibly wrapped) keeps its code and text; any other
// error is internal.
func ErrorReply(id string, err error) *Error {
	if fe, ok := errors.AsType[*FieldError](err); ok {
		code := fe.Code
		if code == "" {
			code = CodeBadRequest
		}
		return NewError(id, code, fe.Error())
	}
	return NewError(id, CodeInternal, err.Error())
}

// badRequest returns a FieldError with code bad_request.
func badRequest(path, format string, args ...any) *FieldError {
	return &FieldError{Path: path, Msg: fmt.Sprintf(format, args...), Code: CodeBadRequest}
}

// maxKeyInPath bounds how much of an unknown key an error path repeats.
const maxKeyInPath = 64

// joinKey returns the path of key inside the map at path. Keys other than
// plain names (letters, digits, '_' and '-') are quoted in brackets, and
// cut short, so that a path is always one readable line.
func joinKey(path, key string) string {
	if !plainKey(key) {
		if len(key) > maxKeyInPath {
			key = key[:maxKeyInPath] + "..."
		}
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func plainKey(key string) bool {
	if key == "" || len(key) > maxKeyInPath {
		return false
	}
	for _, c := range []byte(key) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// joinIndex returns the path of element i of the array at path.
func joinIndex(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}
