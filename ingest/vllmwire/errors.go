package vllmwire

import "errors"

// Sentinel errors. Every decode error wraps exactly one of them, with the path of the bad value.
var (
	// ErrMalformed: the payload is not a well-formed EventBatch (bad msgpack, wrong types, truncated,
	// trailing bytes, a missing required field).
	ErrMalformed = errors.New("malformed payload")
	// ErrLimit: the payload is well-formed but exceeds a decoder bound (events per batch, nesting,
	// string length, block size, dp rank).
	ErrLimit = errors.New("limit exceeded")
	// ErrUnencodable: Encode was given a batch it cannot represent (an unknown event kind).
	ErrUnencodable = errors.New("unencodable batch")
)
