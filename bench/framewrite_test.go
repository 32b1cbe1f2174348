package main

import (
	"bytes"
	"testing"
)

func TestDecodeServerMessage(t *testing.T) {
	tests := []struct {
		name    string
		in      []byte
		wantErr bool
	}{
		{"one frame", []byte{0x82, 2, 'h', 'i'}, false},
		{"fragments", []byte{0x02, 1, 'h', 0x80, 1, 'i'}, false},
		{"masked", []byte{0x82, 0x82, 0, 0, 0, 0, 'h', 'i'}, true},
		{"reserved bit", []byte{0xc2, 2, 'h', 'i'}, true},
		{"trailing bytes", []byte{0x82, 2, 'h', 'i', 0}, true},
		{"short", []byte{0x82, 5, 'h'}, true},
		{"continuation first", []byte{0x80, 2, 'h', 'i'}, true},
		{"close frame", []byte{0x88, 2, 0x03, 0xe8}, true},
		{"ping between fragments", []byte{0x02, 1, 'h', 0x89, 0, 0x80, 1, 'i'}, true},
	}
	for _, tt := range tests {
		op, p, err := decodeServerMessage(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("%s: err = %v, want error %v", tt.name, err, tt.wantErr)
		}
		if err == nil && (op != 2 || string(p) != "hi") {
			t.Errorf("%s: got %d %q", tt.name, op, p)
		}
	}
}

// TestFrameWritersWriteTheMessage checks every library's write path once
// per size, byte for byte, as the scenario does before timing.
func TestFrameWritersWriteTheMessage(t *testing.T) {
	for _, fw := range frameWriters {
		for _, size := range frameSizes {
			conn := newDiscardConn()
			write, err := fw.Open(conn)
			if err != nil {
				t.Errorf("%s: %v", fw.Library, err)
				continue
			}
			payload := bytes.Repeat([]byte{7}, size)
			conn.recording = true
			if err := write(payload); err != nil {
				t.Errorf("%s %d B: %v", fw.Library, size, err)
				continue
			}
			if err := checkWritten(conn.recorded, payload, fw.Header); err != nil {
				t.Errorf("%s %d B: %v", fw.Library, size, err)
			}
			conn.Close()
		}
	}
}
