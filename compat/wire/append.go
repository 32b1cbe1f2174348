package wire

import (
	"encoding/binary"

	"github.com/hotpath-go/hotpath/dispatch"
)

// Append encodes p and appends it to dst. It writes the fields that p.Kind
// uses (PROTOCOL.md §3) and ignores the others; for Batch and Capabilities,
// p.Payload must already hold the encoded items or pairs (AppendItem,
// AppendPair) and p.Count their number. Compressed packets are encoded with
// AppendCompressed. Append does not validate lengths: encoding a name over
// MaxNameLen yields a packet the peer rejects.
func Append(dst []byte, p *Packet) []byte {
	dst = append(dst, byte(p.Kind))
	switch p.Kind {
	case dispatch.KindCall, dispatch.KindAsk:
		dst = binary.AppendUvarint(dst, uint64(p.ID))
		dst = appendBytes(dst, p.Name)
		dst = binary.AppendUvarint(dst, uint64(p.Timeout))
	case dispatch.KindResult:
		dst = binary.AppendUvarint(dst, uint64(p.ID))
	case dispatch.KindError:
		dst = binary.AppendUvarint(dst, uint64(p.ID))
		dst = binary.AppendUvarint(dst, uint64(p.Code))
		dst = appendBytes(dst, p.Message)
	case dispatch.KindEvent:
		dst = appendBytes(dst, p.Name)
	case dispatch.KindAnswer:
		dst = binary.AppendUvarint(dst, uint64(p.ID))
		dst = append(dst, p.Status)
		if p.Status == AnswerError {
			dst = binary.AppendUvarint(dst, uint64(p.Code))
			dst = appendBytes(dst, p.Message)
		}
	case dispatch.KindBatch, dispatch.KindCapabilities:
		dst = binary.AppendUvarint(dst, uint64(p.Count))
	case dispatch.KindJoin, dispatch.KindLeave:
		dst = binary.AppendUvarint(dst, uint64(p.ID))
		dst = appendBytes(dst, p.Room)
		return dst
	case dispatch.KindEmit:
		dst = appendBytes(dst, p.Room)
		dst = appendBytes(dst, p.Name)
		dst = append(dst, p.Flags)
	}
	return append(dst, p.Payload...)
}

// AppendCompressed appends a packet of the given kind whose body was
// compressed with the negotiated dictionary codec.
func AppendCompressed(dst []byte, kind Kind, compressedBody []byte) []byte {
	dst = append(dst, byte(kind)|CompressedBit)
	return append(dst, compressedBody...)
}

// AppendResult appends a Result packet: the hot path of every answered call.
func AppendResult(dst []byte, id uint32, payload []byte) []byte {
	dst = append(dst, byte(dispatch.KindResult))
	dst = binary.AppendUvarint(dst, uint64(id))
	return append(dst, payload...)
}

// AppendError appends an Error packet.
func AppendError(dst []byte, id, code uint32, message string, data []byte) []byte {
	dst = append(dst, byte(dispatch.KindError))
	dst = binary.AppendUvarint(dst, uint64(id))
	dst = binary.AppendUvarint(dst, uint64(code))
	dst = appendString(dst, message)
	return append(dst, data...)
}

// AppendCall appends a Call packet (or, with kind KindAsk, an Ask).
func AppendCall(dst []byte, kind Kind, id uint32, method string, timeoutMS uint32, payload []byte) []byte {
	dst = append(dst, byte(kind))
	dst = binary.AppendUvarint(dst, uint64(id))
	dst = appendString(dst, method)
	dst = binary.AppendUvarint(dst, uint64(timeoutMS))
	return append(dst, payload...)
}

// AppendEmit appends an Emit packet.
func AppendEmit(dst []byte, room, event string, flags uint8, payload []byte) []byte {
	dst = append(dst, byte(dispatch.KindEmit))
	dst = appendString(dst, room)
	dst = appendString(dst, event)
	dst = append(dst, flags)
	return append(dst, payload...)
}

// AppendItem appends one batch item, length first, to the items of a batch
// being built.
func AppendItem(items, packet []byte) []byte {
	items = binary.AppendUvarint(items, uint64(len(packet)))
	return append(items, packet...)
}

// AppendPair appends one key/value pair to the pairs of a Capabilities
// packet being built.
func AppendPair(pairs []byte, key, value string) []byte {
	pairs = appendString(pairs, key)
	return appendString(pairs, value)
}

func appendBytes(dst, s []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}
