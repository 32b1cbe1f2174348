// Package refwire is a second codec for the packets of compat/PROTOCOL.md,
// written from the specification alone, as the JavaScript client's codec
// is: the reference the fuzz targets hold compat/wire and the compat
// server to. It favours plainness over speed and shares no code with
// compat/wire.
package refwire

import (
	"encoding/hex"
	"unicode/utf8"
)

// Model is a packet in the JSON form of golden.json. Items a batch holds
// that do not decode (a batch checks only their delimiting) keep their
// bytes in Hex.
type Model struct {
	Kind       string      `json:"kind"`
	Compressed bool        `json:"compressed,omitempty"`
	BodyHex    string      `json:"body_hex,omitempty"`
	Hex        string      `json:"hex,omitempty"`
	ID         uint32      `json:"id,omitempty"`
	Method     string      `json:"method,omitempty"`
	Event      string      `json:"event,omitempty"`
	Room       string      `json:"room,omitempty"`
	Timeout    uint32      `json:"timeout,omitempty"`
	Flags      uint8       `json:"flags,omitempty"`
	Status     uint8       `json:"status,omitempty"`
	Code       uint32      `json:"code,omitempty"`
	Message    string      `json:"message,omitempty"`
	Payload    string      `json:"payload,omitempty"`
	Data       string      `json:"data,omitempty"`
	Items      []Model     `json:"items,omitempty"`
	Pairs      [][2]string `json:"pairs,omitempty"`
}

// Verdict is how a decoder classes a packet, as golden.json's "error" does.
type Verdict string

const (
	Accepted    Verdict = "ok"
	Empty       Verdict = "empty"
	UnknownKind Verdict = "unknown kind"
	Malformed   Verdict = "malformed"
)

// kindNames are the packet kinds of PROTOCOL.md §3, by number.
var kindNames = [...]string{1: "call", 2: "result", 3: "error", 4: "event", 5: "ask", 6: "answer",
	7: "batch", 8: "ping", 9: "pong", 10: "join", 11: "leave", 12: "emit", 13: "capabilities"}

// KindNumber returns the number of the kind named name, or 0.
func KindNumber(name string) byte {
	for i, n := range kindNames {
		if n == name && n != "" {
			return byte(i)
		}
	}
	return 0
}

// cursor reads the fields of PROTOCOL.md §2 from a body; ok turns false at
// the first field that breaks a rule and stays false.
type cursor struct {
	b  []byte
	ok bool
}

// u32 reads a 32-bit uvarint: LEB128, at most 5 bytes, a value below 2^32,
// in its shortest form. PROTOCOL.md §2 requires the shortest form of
// encoders only, but golden.json lists "id not in shortest form" as
// malformed, so a decoder refuses it too.
func (c *cursor) u32() uint32 {
	var v uint64
	for i := 0; c.ok; i++ {
		if i == 5 || i == len(c.b) {
			c.ok = false
			break
		}
		x := c.b[i]
		v |= uint64(x&0x7F) << (7 * i)
		if x < 0x80 {
			if i > 0 && x == 0 || v > 1<<32-1 {
				c.ok = false
				break
			}
			c.b = c.b[i+1:]
			return uint32(v)
		}
	}
	return 0
}

func (c *cursor) u8() uint8 {
	if !c.ok || len(c.b) == 0 {
		c.ok = false
		return 0
	}
	v := c.b[0]
	c.b = c.b[1:]
	return v
}

// str reads a length-prefixed UTF-8 string of lo to hi bytes.
func (c *cursor) str(lo, hi int) string {
	n := int64(c.u32())
	if !c.ok || n > int64(len(c.b)) || n < int64(lo) || n > int64(hi) || !utf8.Valid(c.b[:n]) {
		c.ok = false
		return ""
	}
	s := string(c.b[:n])
	c.b = c.b[n:]
	return s
}

// The string bounds of PROTOCOL.md §2: names are 1-255 bytes, a capability
// value or an error message at most 4096. The spec gives no bound for a
// capability key; wire applies the name bound, so the reference does too.
func (c *cursor) name() string  { return c.str(1, 255) }
func (c *cursor) value() string { return c.str(0, 4096) }
func (c *cursor) key() string   { return c.str(0, 255) }

// rest takes every remaining byte.
func (c *cursor) rest() string {
	s := string(c.b)
	c.b = nil
	return s
}

// Decode decodes one packet as PROTOCOL.md §3 and §4 describe it.
func Decode(b []byte) (Model, Verdict) {
	if len(b) == 0 {
		return Model{}, Empty
	}
	k := int(b[0] & 0x7F)
	if k == 0 || k >= len(kindNames) {
		return Model{}, UnknownKind
	}
	m := Model{Kind: kindNames[k]}
	if b[0]&0x80 != 0 {
		// §3: the body is the dictionary codec's output, opaque here.
		m.Compressed, m.BodyHex = true, hex.EncodeToString(b[1:])
		return m, Accepted
	}
	c := &cursor{b: b[1:], ok: true}
	switch m.Kind {
	case "call", "ask":
		m.ID, m.Method, m.Timeout = c.u32(), c.name(), c.u32()
		m.Payload = c.rest()
	case "result":
		m.ID = c.u32()
		m.Payload = c.rest()
	case "error":
		m.ID, m.Code, m.Message = c.u32(), c.u32(), c.value()
		m.Data = c.rest()
	case "event":
		m.Event = c.name()
		m.Payload = c.rest()
	case "answer":
		m.ID, m.Status = c.u32(), c.u8()
		switch {
		case m.Status == 0:
			m.Payload = c.rest()
		case m.Status == 1:
			m.Code, m.Message = c.u32(), c.value()
			m.Data = c.rest()
		default:
			c.ok = false
		}
	case "batch":
		// §4.7: count packets, each preceded by its length; count is 1 or
		// more; items are not batches, capabilities, or compressed.
		count := c.u32()
		c.ok = c.ok && count >= 1
		for i := uint32(0); c.ok && i < count; i++ {
			n := c.u32()
			if !c.ok || n == 0 || int64(n) > int64(len(c.b)) || c.b[0]&0x80 != 0 || c.b[0] == 7 || c.b[0] == 13 {
				c.ok = false
				break
			}
			item, v := Decode(c.b[:n])
			if v != Accepted {
				item = Model{Hex: hex.EncodeToString(c.b[:n])}
			}
			m.Items = append(m.Items, item)
			c.b = c.b[n:]
		}
		c.ok = c.ok && len(c.b) == 0
	case "ping", "pong":
		m.Data = c.rest()
	case "join", "leave":
		m.ID, m.Room = c.u32(), c.name()
		c.ok = c.ok && len(c.b) == 0
	case "emit":
		m.Room, m.Event, m.Flags = c.name(), c.name(), c.u8()
		m.Payload = c.rest()
	case "capabilities":
		count := c.u32()
		for i := uint32(0); c.ok && i < count; i++ {
			m.Pairs = append(m.Pairs, [2]string{c.key(), c.value()})
		}
		c.ok = c.ok && len(c.b) == 0
	}
	if !c.ok {
		return Model{}, Malformed
	}
	return m, Accepted
}

// Encode encodes a Model in the shortest form PROTOCOL.md §2 asks of
// encoders.
func Encode(m Model) []byte {
	if m.Hex != "" {
		b, _ := hex.DecodeString(m.Hex)
		return b
	}
	u := func(b []byte, v uint32) []byte {
		for v >= 0x80 {
			b = append(b, byte(v)|0x80)
			v >>= 7
		}
		return append(b, byte(v))
	}
	s := func(b []byte, v string) []byte { return append(u(b, uint32(len(v))), v...) }
	k := KindNumber(m.Kind)
	if m.Compressed {
		body, _ := hex.DecodeString(m.BodyHex)
		return append([]byte{k | 0x80}, body...)
	}
	b := []byte{k}
	switch m.Kind {
	case "call", "ask":
		b = append(u(s(u(b, m.ID), m.Method), m.Timeout), m.Payload...)
	case "result":
		b = append(u(b, m.ID), m.Payload...)
	case "error":
		b = append(s(u(u(b, m.ID), m.Code), m.Message), m.Data...)
	case "event":
		b = append(s(b, m.Event), m.Payload...)
	case "answer":
		b = append(u(b, m.ID), m.Status)
		if m.Status == 1 {
			b = append(s(u(b, m.Code), m.Message), m.Data...)
		} else {
			b = append(b, m.Payload...)
		}
	case "batch":
		b = u(b, uint32(len(m.Items)))
		for _, it := range m.Items {
			item := Encode(it)
			b = append(u(b, uint32(len(item))), item...)
		}
	case "ping", "pong":
		b = append(b, m.Data...)
	case "join", "leave":
		b = s(u(b, m.ID), m.Room)
	case "emit":
		b = append(append(s(s(b, m.Room), m.Event), m.Flags), m.Payload...)
	case "capabilities":
		b = u(b, uint32(len(m.Pairs)))
		for _, kv := range m.Pairs {
			b = s(s(b, kv[0]), kv[1])
		}
	}
	return b
}
