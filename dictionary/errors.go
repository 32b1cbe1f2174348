package dictionary

import "errors"

// The reasons a compressed message is refused. Test for them with errors.Is;
// errors.As with a *DecodeError gives the codec and the limit.
var (
	// ErrTooLarge: the message would decode to more than the codec's
	// MaxDecoded bytes. Decoding stopped before allocating past the cap.
	ErrTooLarge = errors.New("decoded message exceeds the cap")
	// ErrCorrupt: the input is not a valid compressed message.
	ErrCorrupt = errors.New("corrupt compressed message")
	// ErrOtherDictionary: the message names a dictionary this codec does
	// not hold. Only zstd can tell (its frame carries the dictionary id);
	// raw deflate cannot, see Deflate.
	ErrOtherDictionary = errors.New("message was compressed with another dictionary")
	// ErrClosed: the codec was closed (Zstd.Close); the message was not
	// looked at, so it says nothing about the peer.
	ErrClosed = errors.New("codec used after Close")
)

// DecodeError is returned by AppendDecompress. It wraps one of ErrTooLarge,
// ErrCorrupt, ErrOtherDictionary or ErrClosed and, when there is one, the error of the
// underlying decompressor.
type DecodeError struct {
	Codec  string // "deflate" or "zstd"
	Reason error  // ErrTooLarge, ErrCorrupt, ErrOtherDictionary or ErrClosed
	Limit  int    // the codec's MaxDecoded
	Cause  error  // the decompressor's own error, or nil
}

// Error names the codec, the reason and, when there is one, the
// underlying codec's error.
func (e *DecodeError) Error() string {
	msg := "dictionary: " + e.Codec + ": " + e.Reason.Error()
	if e.Cause != nil {
		msg += ": " + e.Cause.Error()
	}
	return msg
}

// Unwrap lets errors.Is find both the reason and the cause.
func (e *DecodeError) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Reason}
	}
	return []error{e.Reason, e.Cause}
}
