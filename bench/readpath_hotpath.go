package main

import (
	"errors"
	"net"

	"github.com/hotpath-go/hotpath/segmentqueue"
	"github.com/hotpath-go/hotpath/wsframe"
)

func init() {
	frameReaders = append(frameReaders, frameReader{Library: "hotpath", Role: Ours, Open: openHotpathReader})
}

// openHotpathReader: a wsframe.Decoder taking whole messages from a
// segmentqueue.Queue that Fill reads into straight from the connection.
// A message of one frame lying in one segment comes out without a copy;
// the fragments of a message are copied once into an assembly buffer
// reused from message to message. For a large frame the queue reserves
// one buffer for it (Reserve), so the frame is not copied out of the
// chunks it arrived in.
func openHotpathReader(conn net.Conn, _ readStream, onMessage func(int, []byte)) error {
	dec := wsframe.NewDecoder(wsframe.Config{MaxMessageSize: readMaxMessage, MaxFragments: 4096})
	q := segmentqueue.New(segmentqueue.Limits{})
	go func() {
		var asm []byte
		for {
			m, err := dec.NextMessage(q, &asm)
			if errors.Is(err, wsframe.ErrNeedMore) {
				if need := q.Len() + dec.Need(); dec.Need() > 4<<10 {
					if err := q.Reserve(need); err != nil {
						return
					}
				}
				if _, err := q.Fill(conn); err != nil {
					return
				}
				continue
			}
			if err != nil {
				return
			}
			if !m.Opcode.IsControl() {
				onMessage(len(m.Payload), m.Payload)
			}
		}
	}()
	return nil
}
