//go:build unix

package corkwriter

import "testing"

// FuzzWriter drives a Writer with fuzzer-chosen writes, shared writes,
// corks, uncorks and flushes, against a fake descriptor whose partial
// writes, EINTR and EAGAIN are chosen by the seed, and checks the byte
// stream against the model after every step.
func FuzzWriter(f *testing.F) {
	f.Add(uint64(1), true, uint16(0), []byte{
		byte(opCork), 0, 64, byte(opWrite), 0, 64, byte(opWrite), 0, 64,
		byte(opShared) | 0xc0, 0x40, 0, byte(opWrite), 0, 64, byte(opUncork), 0, 0,
	})
	f.Add(uint64(2), false, uint16(1000), []byte{
		byte(opWrite) | 0xc0, 0xff, 0xff, byte(opShared) | 0xc0, 0x80, 0,
		byte(opFlush), 0, 0, byte(opWrite), 0, 1,
	})
	f.Add(uint64(3), true, uint16(1), []byte{
		byte(opCork), 0, 0, byte(opCork), 0, 0, byte(opShared), 1, 0,
		byte(opUncork), 0, 0, byte(opWrite), 3, 0xff, byte(opUncork), 0, 0,
	})
	f.Fuzz(func(t *testing.T, seed uint64, blocking bool, threshold uint16, ops []byte) {
		failures := int(seed % 40)
		partial := seed&1 == 0
		runModel(t, seed, blocking, partial, failures, int(threshold)*16, decodeOps(ops))
	})
}
