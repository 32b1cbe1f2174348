package compat

import (
	"context"
	"encoding/json"
	"testing"
)

// A method of raw bytes allocates nothing per call: the request is the
// payload and the result is appended as it is (methodCall). A JSON method
// still decodes and encodes, and gets the same answers as before.
func TestMethodCallAllocations(t *testing.T) {
	ctx := context.Background()
	raw := methodCall(func(_ context.Context, req []byte) ([]byte, error) { return req, nil })
	rawJSON := methodCall(func(_ context.Context, req json.RawMessage) (json.RawMessage, error) { return req, nil })
	typed := methodCall(func(_ context.Context, req echoReq) (echoReq, error) { return req, nil })
	payload := []byte(`{"text":"hi"}`)
	dst := make([]byte, 0, 64)
	for name, call := range map[string]func(context.Context, Codec, []byte, []byte) ([]byte, error){"[]byte": raw, "json.RawMessage": rawJSON, "echoReq": typed} {
		out, err := call(ctx, JSON, payload, dst[:0])
		if err != nil || string(out) != string(payload) {
			t.Errorf("%s: %q, %v", name, out, err)
		}
	}
	for name, call := range map[string]func(context.Context, Codec, []byte, []byte) ([]byte, error){"[]byte": raw, "json.RawMessage": rawJSON} {
		if n := testing.AllocsPerRun(100, func() { call(ctx, JSON, payload, dst[:0]) }); n != 0 {
			t.Errorf("%s method: %v allocations per call, want 0", name, n)
		}
	}
	if _, err := typed(ctx, JSON, []byte("{"), dst[:0]); err == nil {
		t.Error("a request that does not decode was taken")
	}
}
