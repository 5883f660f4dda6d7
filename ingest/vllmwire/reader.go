package vllmwire

import (
	"encoding/binary"
	"fmt"
	"math"
)

// reader walks a msgpack buffer token by token. Every length it returns has been checked against the
// bytes that remain (each element or map entry needs at least one byte per item), so a caller may
// loop over it without further checks.
type reader struct {
	buf []byte
	pos int
}

// msgpack type bytes used by the reader and the writer.
const (
	mpNil      = 0xc0
	mpFalse    = 0xc2
	mpTrue     = 0xc3
	mpBin8     = 0xc4
	mpBin16    = 0xc5
	mpBin32    = 0xc6
	mpExt8     = 0xc7
	mpExt16    = 0xc8
	mpExt32    = 0xc9
	mpFloat32  = 0xca
	mpFloat64  = 0xcb
	mpUint8    = 0xcc
	mpUint16   = 0xcd
	mpUint32   = 0xce
	mpUint64   = 0xcf
	mpInt8     = 0xd0
	mpInt16    = 0xd1
	mpInt32    = 0xd2
	mpInt64    = 0xd3
	mpFixExt1  = 0xd4
	mpFixExt2  = 0xd5
	mpFixExt4  = 0xd6
	mpFixExt8  = 0xd7
	mpFixExt16 = 0xd8
	mpStr8     = 0xd9
	mpStr16    = 0xda
	mpStr32    = 0xdb
	mpArray16  = 0xdc
	mpArray32  = 0xdd
	mpMap16    = 0xde
	mpMap32    = 0xdf
)

func (r *reader) remaining() int { return len(r.buf) - r.pos }

func errMalformed(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrMalformed)
}

func errLimit(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrLimit)
}

// peek returns the next type byte without consuming it.
func (r *reader) peek() (byte, error) {
	if r.pos >= len(r.buf) {
		return 0, errMalformed("unexpected end of payload at byte %d", r.pos)
	}
	return r.buf[r.pos], nil
}

// take consumes n bytes.
func (r *reader) take(n int) ([]byte, error) {
	if n < 0 || n > r.remaining() {
		return nil, errMalformed("need %d bytes at byte %d, %d remain", n, r.pos, r.remaining())
	}
	b := r.buf[r.pos : r.pos+n]
	r.pos += n
	return b, nil
}

// uintN reads a big-endian unsigned integer of size bytes (1, 2, 4 or 8).
func (r *reader) uintN(size int) (uint64, error) {
	b, err := r.take(size)
	if err != nil {
		return 0, err
	}
	switch size {
	case 1:
		return uint64(b[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(b)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(b)), nil
	}
	return binary.BigEndian.Uint64(b), nil
}

// readNil consumes a nil and reports true, or consumes nothing and reports false.
func (r *reader) readNil() bool {
	if r.pos < len(r.buf) && r.buf[r.pos] == mpNil {
		r.pos++
		return true
	}
	return false
}

// isArray and isMap tell the kind of the next value without consuming it.
func (r *reader) isArray() bool {
	c, err := r.peek()
	return err == nil && (c&0xf0 == 0x90 || c == mpArray16 || c == mpArray32)
}

func (r *reader) isMap() bool {
	c, err := r.peek()
	return err == nil && (c&0xf0 == 0x80 || c == mpMap16 || c == mpMap32)
}

// readArrayLen reads an array header. The length is bounded by the remaining bytes.
func (r *reader) readArrayLen() (int, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case c&0xf0 == 0x90:
		r.pos++
		n = uint64(c & 0x0f)
	case c == mpArray16:
		r.pos++
		n, err = r.uintN(2)
	case c == mpArray32:
		r.pos++
		n, err = r.uintN(4)
	default:
		return 0, errMalformed("want array at byte %d, got type 0x%02x", r.pos, c)
	}
	if err != nil {
		return 0, err
	}
	if n > uint64(r.remaining()) {
		return 0, errMalformed("array of %d items but %d bytes remain", n, r.remaining())
	}
	return int(n), nil
}

// readMapLen reads a map header. The length is bounded by the remaining bytes (two per entry).
func (r *reader) readMapLen() (int, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case c&0xf0 == 0x80:
		r.pos++
		n = uint64(c & 0x0f)
	case c == mpMap16:
		r.pos++
		n, err = r.uintN(2)
	case c == mpMap32:
		r.pos++
		n, err = r.uintN(4)
	default:
		return 0, errMalformed("want map at byte %d, got type 0x%02x", r.pos, c)
	}
	if err != nil {
		return 0, err
	}
	if n > uint64(r.remaining())/2 {
		return 0, errMalformed("map of %d entries but %d bytes remain", n, r.remaining())
	}
	return int(n), nil
}

// strOrBinLen reads a str or bin header and returns the payload length (checked against remaining).
// isStr tells which one it was.
func (r *reader) strOrBinLen() (n int, isStr bool, err error) {
	c, err := r.peek()
	if err != nil {
		return 0, false, err
	}
	var l uint64
	switch {
	case c&0xe0 == 0xa0:
		r.pos++
		l, isStr = uint64(c&0x1f), true
	case c == mpStr8, c == mpBin8:
		r.pos++
		l, err = r.uintN(1)
		isStr = c == mpStr8
	case c == mpStr16, c == mpBin16:
		r.pos++
		l, err = r.uintN(2)
		isStr = c == mpStr16
	case c == mpStr32, c == mpBin32:
		r.pos++
		l, err = r.uintN(4)
		isStr = c == mpStr32
	default:
		return 0, false, errMalformed("want string or bytes at byte %d, got type 0x%02x", r.pos, c)
	}
	if err != nil {
		return 0, false, err
	}
	if l > uint64(r.remaining()) {
		return 0, false, errMalformed("string of %d bytes but %d remain", l, r.remaining())
	}
	return int(l), isStr, nil
}

// readString reads a str (bin is accepted too: some encoders send names as bytes) of at most
// maxStringLen bytes.
func (r *reader) readString() (string, error) {
	n, _, err := r.strOrBinLen()
	if err != nil {
		return "", err
	}
	if n > maxStringLen {
		return "", errLimit("string of %d bytes (max %d)", n, maxStringLen)
	}
	b, err := r.take(n)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// readInteger reads any msgpack integer. It returns the value's two's-complement bit pattern and
// whether it is negative: a uint64 above MaxInt64 is (bits, false), int64(-1) is (MaxUint64, true).
func (r *reader) readInteger() (bits uint64, neg bool, err error) {
	c, err := r.peek()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c <= 0x7f:
		r.pos++
		return uint64(c), false, nil
	case c >= 0xe0:
		r.pos++
		return uint64(int64(int8(c))), true, nil
	}
	start := r.pos
	r.pos++
	var u uint64
	switch c {
	case mpUint8:
		u, err = r.uintN(1)
		return u, false, err
	case mpUint16:
		u, err = r.uintN(2)
		return u, false, err
	case mpUint32:
		u, err = r.uintN(4)
		return u, false, err
	case mpUint64:
		u, err = r.uintN(8)
		return u, false, err
	case mpInt8:
		u, err = r.uintN(1)
		v := int64(int8(u))
		return uint64(v), v < 0, err
	case mpInt16:
		u, err = r.uintN(2)
		v := int64(int16(u))
		return uint64(v), v < 0, err
	case mpInt32:
		u, err = r.uintN(4)
		v := int64(int32(u))
		return uint64(v), v < 0, err
	case mpInt64:
		u, err = r.uintN(8)
		v := int64(u)
		return uint64(v), v < 0, err
	}
	r.pos = start
	return 0, false, errMalformed("want integer at byte %d, got type 0x%02x", start, c)
}

// readIntRange reads an integer that must lie in [lo, hi].
func (r *reader) readIntRange(lo, hi int64) (int64, error) {
	start := r.pos
	bits, neg, err := r.readInteger()
	if err != nil {
		return 0, err
	}
	if !neg && bits > math.MaxInt64 {
		return 0, errLimit("integer %d at byte %d out of range [%d, %d]", bits, start, lo, hi)
	}
	v := int64(bits)
	if v < lo || v > hi {
		return 0, errLimit("integer %d at byte %d out of range [%d, %d]", v, start, lo, hi)
	}
	return v, nil
}

// readFloat reads a float32, float64 or integer as float64.
func (r *reader) readFloat() (float64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch c {
	case mpFloat32:
		r.pos++
		u, err := r.uintN(4)
		return float64(math.Float32frombits(uint32(u))), err
	case mpFloat64:
		r.pos++
		u, err := r.uintN(8)
		return math.Float64frombits(u), err
	}
	bits, neg, err := r.readInteger()
	if err != nil {
		return 0, errMalformed("want number at byte %d, got type 0x%02x", r.pos, c)
	}
	if neg {
		return float64(int64(bits)), nil
	}
	return float64(bits), nil
}

// readHash reads a block hash: an integer (bit-cast to uint64) or a byte string of 1..maxHashBytes
// bytes, of which the last min(8, len) are read big-endian (vLLM's sha256 digests are 32 bytes).
func (r *reader) readHash() (uint64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	if c <= 0x7f || c >= 0xe0 || (c >= mpUint8 && c <= mpInt64) {
		bits, _, err := r.readInteger()
		return bits, err
	}
	start := r.pos
	n, _, err := r.strOrBinLen()
	if err != nil {
		return 0, errMalformed("want block hash (integer or bytes) at byte %d, got type 0x%02x", start, c)
	}
	if n == 0 {
		return 0, errMalformed("empty block hash at byte %d", start)
	}
	if n > maxHashBytes {
		return 0, errLimit("block hash of %d bytes at byte %d (max %d)", n, start, maxHashBytes)
	}
	b, err := r.take(n)
	if err != nil {
		return 0, err
	}
	if n > 8 {
		b = b[n-8:]
	}
	var h uint64
	for _, x := range b {
		h = h<<8 | uint64(x)
	}
	return h, nil
}

// skip consumes one value of any type, nested at most maxDepth-depth levels deeper.
func (r *reader) skip(depth int) error {
	if depth > maxDepth {
		return errLimit("nesting deeper than %d at byte %d", maxDepth, r.pos)
	}
	c, err := r.peek()
	if err != nil {
		return err
	}
	switch {
	case c <= 0x7f || c >= 0xe0 || c == mpNil || c == mpFalse || c == mpTrue:
		r.pos++
		return nil
	case c&0xe0 == 0xa0 || c == mpStr8 || c == mpStr16 || c == mpStr32 ||
		c == mpBin8 || c == mpBin16 || c == mpBin32:
		n, _, err := r.strOrBinLen()
		if err != nil {
			return err
		}
		_, err = r.take(n)
		return err
	case r.isArray():
		n, err := r.readArrayLen()
		if err != nil {
			return err
		}
		for range n {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case r.isMap():
		n, err := r.readMapLen()
		if err != nil {
			return err
		}
		for range 2 * n {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	}
	r.pos++
	var size uint64
	switch c {
	case mpFloat32:
		size = 4
	case mpFloat64:
		size = 8
	case mpUint8, mpInt8:
		size = 1
	case mpUint16, mpInt16:
		size = 2
	case mpUint32, mpInt32:
		size = 4
	case mpUint64, mpInt64:
		size = 8
	case mpFixExt1:
		size = 1 + 1
	case mpFixExt2:
		size = 1 + 2
	case mpFixExt4:
		size = 1 + 4
	case mpFixExt8:
		size = 1 + 8
	case mpFixExt16:
		size = 1 + 16
	case mpExt8, mpExt16, mpExt32:
		w := 1
		if c == mpExt16 {
			w = 2
		} else if c == mpExt32 {
			w = 4
		}
		l, err := r.uintN(w)
		if err != nil {
			return err
		}
		size = l + 1 // type byte, then data
	default: // 0xc1 is never used
		return errMalformed("invalid msgpack type 0x%02x at byte %d", c, r.pos-1)
	}
	if size > uint64(r.remaining()) {
		return errMalformed("value of %d bytes but %d remain", size, r.remaining())
	}
	r.pos += int(size)
	return nil
}
