//! Span inputs: JSONL span logs, OTLP JSON lines, OTLP protobuf (SPEC §2.2).
