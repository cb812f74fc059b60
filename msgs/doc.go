// Package msgs is vlanode's wire protocol, version 1: the messages that robot
// stacks and nodes exchange over NATS, their msgpack encoding, and their
// validation.
//
// Every message is a msgpack map with snake_case string keys and carries
// "v": 1 (Version). Decoding is strict about types and tolerant of unknown
// keys: a missing required key, a value of the wrong type, or a value that
// fails validation is reported as a *FieldError whose Path names the field
// (for example "frames[3].width"); keys this version does not know are
// skipped. docs/protocol.md describes the protocol for robot-stack authors.
//
// Receivers decode with DecodeFrame and DecodeInferRequest (the node) or
// DecodeReply, DecodePlan, DecodeError and DecodeStatus (clients); senders
// encode with Marshal, which stamps the version.
package msgs
