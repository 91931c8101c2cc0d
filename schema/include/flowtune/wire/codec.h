// Encoding and decoding of protocol messages. Decoders never throw: any byte
// string yields either a fully validated message or an error naming the
// cause, so a daemon can count causes and answer the sender.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "flowtune/wire/messages.h"

namespace flowtune::wire {

enum class DecodeError {
  kOk = 0,
  kTooLarge,            // over kMaxMessageBytes
  kTruncated,           // empty
  kMalformed,           // Cap'n Proto rejected the bytes (truncated, bad pointers, limits)
  kUnsupportedVersion,  // well-formed, other protocol version
  kBadValue,            // well-formed, a field out of range (detail names it)
};
const char* to_string(DecodeError e);

// The error code an allocator reports for a decode failure.
ErrorCode error_code_for(DecodeError e);

struct DecodeStatus {
  DecodeError error = DecodeError::kOk;
  std::string detail;  // which field, what value
  std::uint16_t version = 0;  // the sender's version when known
  bool ok() const { return error == DecodeError::kOk; }
};

std::vector<std::uint8_t> encode(const EndpointMessage& m);
std::vector<std::uint8_t> encode(const AllocatorMessage& m);

// What decoding a packed frame costs: the bytes it unpacks to, from a scan
// of its tags (no allocation, a few ns a word), stopping once past the
// bound decode() refuses at (64 times the frame, 64 KiB at least). The
// allocator charges it before decoding.
std::size_t unpacked_bytes(std::span<const std::uint8_t> packed);

// Messages are packed Cap'n Proto; bytes need no particular alignment. *out
// is written only when the result is ok().
DecodeStatus decode(std::span<const std::uint8_t> bytes, EndpointMessage* out);
// The same, given unpacked_bytes(bytes) (so a frame priced before it is
// decoded is scanned once).
DecodeStatus decode(std::span<const std::uint8_t> bytes, std::size_t unpacked, EndpointMessage* out);
DecodeStatus decode(std::span<const std::uint8_t> bytes, AllocatorMessage* out);

}  // namespace flowtune::wire
