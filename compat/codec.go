package compat

import (
	"encoding/json"
	"fmt"
	"reflect"
)

// A Codec encodes and decodes payloads: call requests and results, event
// and emit payloads, error data. JSON is the default and the only one
// hotpath.v1 names; a server may install another for its own clients. Both
// ends name their codec in capabilities (PROTOCOL.md §4.9): a server closes
// a connection whose client does not offer its codec, and a client one
// whose server names another, with 1008 HP_ERR_UNSUPPORTED_CODEC, rather
// than fail every call as invalid params.
//
// A Codec must be safe for concurrent use.
type Codec interface {
	// Name is the codec's name in the capabilities exchange.
	Name() string
	// AppendMarshal appends the encoding of v to dst.
	AppendMarshal(dst []byte, v any) ([]byte, error)
	// Unmarshal decodes data into v, a non-nil pointer.
	Unmarshal(data []byte, v any) error
}

// JSON is the default Codec: encoding/json.
var JSON Codec = jsonCodec{}

type jsonCodec struct{}

func (jsonCodec) Name() string { return "json" }

func (jsonCodec) AppendMarshal(dst []byte, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// Raw payloads pass through every codec untouched: a method whose request
// or response type is []byte or json.RawMessage sees and sends the payload
// bytes exactly as they travel.
var (
	bytesType      = reflect.TypeFor[[]byte]()
	rawMessageType = reflect.TypeFor[json.RawMessage]()
)

func isRaw(t reflect.Type) bool { return t == bytesType || t == rawMessageType }

// marshal appends v with codec, or the bytes themselves for a raw type.
// A codec that panics (a MarshalJSON of v's that does) fails this one
// encoding with an error: the panic left a call the client had put in its
// pending table there until the connection ended, and on WebSocket kept
// that connection's callers from reading their own answers for good.
func marshal(codec Codec, dst []byte, v any) (_ []byte, err error) {
	switch b := v.(type) {
	case []byte:
		return append(dst, b...), nil
	case json.RawMessage:
		return append(dst, b...), nil
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("hotpath: the %s codec panicked encoding a %T: %v", codec.Name(), v, r)
		}
	}()
	return codec.AppendMarshal(dst, v)
}

// payloadHint is about how many bytes marshal appends for v: exact for
// raw bytes, a small event's size otherwise.
func payloadHint(v any) int {
	switch b := v.(type) {
	case []byte:
		return len(b)
	case json.RawMessage:
		return len(b)
	}
	return 128
}

// unmarshal decodes data into v with codec, or aliases the bytes for a raw
// type. An empty payload leaves a non-raw v at its zero value, so a method
// without parameters can be called with none.
func unmarshal(codec Codec, data []byte, v any) error {
	switch p := v.(type) {
	case *[]byte:
		*p = data
		return nil
	case *json.RawMessage:
		*p = data
		return nil
	}
	if len(data) == 0 {
		return nil
	}
	return codec.Unmarshal(data, v)
}
