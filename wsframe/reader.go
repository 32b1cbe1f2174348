package wsframe

import (
	"errors"
	"io"
)

// DefaultReaderSize is the read buffer size of a Reader made with size 0.
const DefaultReaderSize = 4096

// Reader reads messages from an io.Reader (a net.Conn, a QUIC stream)
// through a Decoder: the convenience for a goroutine-per-connection server
// or a client. An event loop that owns its read buffers calls the Decoder
// directly instead.
//
// Reader keeps one read buffer of the size given to NewReader. A frame that
// does not fit grows it as the frame's bytes arrive, doubling, up to the
// frame's size (which the Decoder bounds by MaxFrameSize before the
// payload is read); the grown buffer, and an
// assembly buffer grown past the read buffer size, are dropped once the
// message is consumed, so a large message does not pin memory on an idle
// connection.
type Reader struct {
	src  io.Reader
	dec  *Decoder
	size int
	buf  []byte // received bytes: buf[r:w] not yet decoded
	r, w int
	msg  []byte // assembly buffer for fragmented messages
	err  error  // read error to return once buf[r:w] is decoded
}

// NewReader returns a Reader that decodes what src delivers with dec,
// reading up to size bytes at a time (DefaultReaderSize when size <= 0).
func NewReader(src io.Reader, dec *Decoder, size int) *Reader {
	if size <= 0 {
		size = DefaultReaderSize
	}
	return &Reader{src: src, dec: dec, size: size}
}

// ReadMessage returns the next data message or control frame. Its payload
// is valid until the next call. At the end of src it returns io.EOF when
// the stream ended between frames and io.ErrUnexpectedEOF when it ended
// inside one or inside a fragmented message; after a close frame it
// returns io.EOF; a protocol violation is the Decoder's *ProtocolError.
func (r *Reader) ReadMessage() (Message, error) {
	if cap(r.msg) > r.size {
		r.msg = nil
	}
	for {
		m, n, err := r.dec.DecodeMessage(r.buf[r.r:r.w], &r.msg)
		r.r += n
		if err == nil {
			return m, nil
		}
		if !errors.Is(err, ErrNeedMore) {
			return Message{}, err
		}
		if err := r.fill(r.dec.Need()); err != nil {
			return Message{}, err
		}
	}
}

// fill reads at least one more byte, with room for up to need more (the
// rest of the frame being decoded). When the buffer is full it grows,
// doubling, towards what the frame needs: it grows with what arrives
// instead of to the size a frame's header announces before any of its
// payload has come. A peer that sent headers of large frames and stopped
// made a server allocate each frame's size for 14 bytes
// (TestReaderGrowsWithWhatArrives).
func (r *Reader) fill(need int) error {
	if r.err != nil {
		return r.eof(r.err)
	}
	if r.r == r.w {
		r.r, r.w = 0, 0
		if cap(r.buf) > r.size {
			r.buf = nil
		}
	}
	if r.buf == nil {
		r.buf = make([]byte, r.size)
	}
	if len(r.buf)-r.w < need {
		pending := r.w - r.r
		if r.r > 0 {
			copy(r.buf, r.buf[r.r:r.w])
			r.r, r.w = 0, pending
		}
		if r.w == len(r.buf) {
			grown := make([]byte, min(pending+need, 2*len(r.buf)))
			copy(grown, r.buf[:r.w])
			r.buf = grown
		}
	}
	n, err := r.src.Read(r.buf[r.w:])
	r.w += n
	if err != nil {
		if n > 0 {
			r.err = err // decode what arrived first
			return nil
		}
		return r.eof(err)
	}
	return nil
}

// eof turns the end of src into io.EOF or io.ErrUnexpectedEOF, depending on
// whether it cut a frame or a message short.
func (r *Reader) eof(err error) error {
	if err == io.EOF && (r.r != r.w || r.dec.inMsg) {
		return io.ErrUnexpectedEOF
	}
	return err
}
