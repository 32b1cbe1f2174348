package main

import (
	"context"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/compat"
)

// TestFanoutRooms runs a small room of every fan-out server in every mode
// it supports: the message check at open (one message inflated and
// compared) and one short trial in which every member must count every
// message.
func TestFanoutRooms(t *testing.T) {
	for _, srv := range fanoutServers {
		if raceEnabled && srv.Library == "lesismal/nbio (epoll)" {
			continue // nbio's engine races under the detector (see TestEchoServersEcho)
		}
		for _, mode := range srv.Modes {
			inst, err := openFanoutRow(srv, mode, 6, 20)(context.Background())
			if err != nil {
				t.Errorf("%s, %s: %v", srv.Library, mode, err)
				continue
			}
			out, err := inst.Trial(context.Background())
			if err != nil || out.Invalid != "" || out.Values["rate"] <= 0 {
				t.Errorf("%s, %s: trial %+v, %v", srv.Library, mode, out, err)
			}
			inst.Close()
		}
	}
}

// TestFrameReaders has every reader read a few messages of each case's
// stream in process: each must deliver whole messages of the right length.
func TestFrameReaders(t *testing.T) {
	for _, spec := range []struct{ size, fragment int }{{200, 200}, {64 << 10, 16 << 10}} {
		stream := clientStream(spec.size, spec.fragment)
		for _, fr := range frameReaders {
			rc := readCase{msgSize: spec.size, fragment: spec.fragment, perOp: 3, segment: 64 << 10}
			inst, err := openReadRow(fr, rc, stream, time.Millisecond)(context.Background())
			if err != nil {
				t.Errorf("%s: %v", fr.Library, err)
				continue
			}
			r := inst.(*readRow)
			if err := r.readMessages(5); err != nil || r.wrong.Load() != 0 {
				t.Errorf("%s, %d B: %v, %d of the wrong length", fr.Library, spec.size, err, r.wrong.Load())
			}
			if fr.Role != Limit && (!r.checked.Load() || r.badContent.Load()) {
				t.Errorf("%s, %d B: first message checked %v, differs %v", fr.Library, spec.size, r.checked.Load(), r.badContent.Load())
			}
			inst.Close()
		}
	}
}

// A reader that hands over a payload of the right length but the wrong
// bytes (still masked, say) makes its row invalid.
func TestReadRowCatchesWrongContent(t *testing.T) {
	r := &readRow{msgSize: 4, payload: []byte("abcd"), reached: make(chan struct{}, 1)}
	r.want.Store(10)
	r.onMessage(4, []byte{'a' ^ 1, 'b' ^ 2, 'c' ^ 3, 'd' ^ 4})
	r.onMessage(4, []byte("abcd"))
	if !r.badContent.Load() {
		t.Error("a first message with the wrong bytes went unnoticed")
	}
}

// TestControlOps runs every control-path operation a few times.
func TestControlOps(t *testing.T) {
	cases, err := controlCases(Config{Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		for _, r := range c.Rows {
			inst, err := r.Open(context.Background())
			if err != nil {
				t.Errorf("%s, %s: %v", c.Label, r.Library, err)
				continue
			}
			if err := inst.(*controlRow).op(3); err != nil {
				t.Errorf("%s, %s: %v", c.Label, r.Library, err)
			}
			inst.Close()
		}
	}
}

// TestCompressionRoundTrips opens every compression row on a short corpus
// of each kind: opening compresses one pass and checks that it comes back.
func TestCompressionRoundTrips(t *testing.T) {
	dict, err := compat.RouterDictionary(compressionRouter())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range jsonKinds {
		corpus := k.corpusN(3)
		for _, row := range compressionRows {
			inst, err := openCompressionRow(row, dict, corpus, time.Millisecond)
			if err != nil {
				t.Errorf("%s, %s: %v", k.label, row.Library, err)
				continue
			}
			inst.Close()
		}
	}
}
