package main

import (
	"net"

	"github.com/hotpath-go/hotpath/corkwriter"
	"github.com/hotpath-go/hotpath/wsframe"
)

// hotpath's frame writers: the three ways its modules put one message on a
// connection.
func init() {
	frameWriters = append(frameWriters,
		frameWriter{Library: "hotpath (AppendFrame)", Role: Ours, Header: true, Open: openAppendFrameWriter},
		frameWriter{Library: "hotpath (header + corkwriter)", Role: Ours, Header: true, Open: openCorkFrameWriter},
		frameWriter{Library: "hotpath (Prepared)", Role: Ours, Header: true, Open: openPreparedWriter},
	)
}

// openAppendFrameWriter: wsframe.AppendFrame into a buffer reused from
// message to message, then one Write: the header and a copy of the payload
// in one slice, so one system call on a real socket.
func openAppendFrameWriter(conn net.Conn) (func([]byte) error, error) {
	var buf []byte
	return func(p []byte) error {
		buf = wsframe.AppendFrame(buf[:0], wsframe.OpBinary, p, wsframe.Fin)
		_, err := conn.Write(buf)
		return err
	}, nil
}

// openCorkFrameWriter: the path wsframe's documentation gives for a
// payload of more than a few KiB: only the header is appended, and header
// and payload leave in one turn of a corkwriter.Writer, which copies the
// header and references the payload (one writev on a socket; on this
// connection, which has no file descriptor, one Write per segment).
func openCorkFrameWriter(conn net.Conn) (func([]byte) error, error) {
	w := corkwriter.NewWriter(conn, nil)
	var hdr []byte
	return func(p []byte) error {
		hdr = wsframe.AppendHeader(hdr[:0], wsframe.Header{Flags: wsframe.Fin, Opcode: wsframe.OpBinary, Length: int64(len(p))})
		w.Cork()
		if _, err := w.Write(hdr); err != nil {
			return err
		}
		if _, err := w.WriteShared(p); err != nil {
			return err
		}
		return w.Uncork()
	}, nil
}

// openPreparedWriter: a wsframe.Prepared per message, the building block
// of a broadcast, written to this one connection as a broadcast writes it
// to each recipient: its header and its payload, both shared, in one turn
// of a corkwriter.Writer. The full frame is never built, so the payload is
// not copied; what this row pays over the others is the Prepared itself.
func openPreparedWriter(conn net.Conn) (func([]byte) error, error) {
	w := corkwriter.NewWriter(conn, nil)
	return func(p []byte) error {
		m, err := wsframe.NewPrepared(wsframe.OpBinary, p)
		if err != nil {
			return err
		}
		w.Cork()
		if _, err := w.WriteShared(m.Header()); err != nil {
			return err
		}
		if _, err := w.WriteShared(m.Payload()); err != nil {
			return err
		}
		return w.Uncork()
	}, nil
}
