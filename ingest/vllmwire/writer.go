package vllmwire

import (
	"encoding/binary"
	"math"
)

// msgpack append helpers. They pick the smallest encoding of each value, as msgspec does, so encoded
// payloads are byte-identical to vLLM's.

func appendNil(b []byte) []byte { return append(b, mpNil) }

func appendUint(b []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, mpUint8, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, mpUint16), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, mpUint32), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, mpUint64), v)
}

// appendInt encodes non-negative values as unsigned (msgspec does the same for Python ints >= 0).
func appendInt(b []byte, v int64) []byte {
	switch {
	case v >= 0:
		return appendUint(b, uint64(v))
	case v >= -32:
		return append(b, byte(int8(v)))
	case v >= math.MinInt8:
		return append(b, mpInt8, byte(int8(v)))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, mpInt16), uint16(int16(v)))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, mpInt32), uint32(int32(v)))
	}
	return binary.BigEndian.AppendUint64(append(b, mpInt64), uint64(v))
}

// appendFloat64 always writes float64: Python floats are doubles and msgspec never narrows them.
func appendFloat64(b []byte, v float64) []byte {
	return binary.BigEndian.AppendUint64(append(b, mpFloat64), math.Float64bits(v))
}

func appendString(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n <= 31:
		b = append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		b = append(b, mpStr8, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, mpStr16), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, mpStr32), uint32(n))
	}
	return append(b, s...)
}

func appendBin(b []byte, p []byte) []byte {
	n := len(p)
	switch {
	case n <= math.MaxUint8:
		b = append(b, mpBin8, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, mpBin16), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, mpBin32), uint32(n))
	}
	return append(b, p...)
}

func appendArrayHeader(b []byte, n int) []byte {
	switch {
	case n <= 15:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, mpArray16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, mpArray32), uint32(n))
}

func appendMapHeader(b []byte, n int) []byte {
	switch {
	case n <= 15:
		return append(b, 0x80|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, mpMap16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, mpMap32), uint32(n))
}
