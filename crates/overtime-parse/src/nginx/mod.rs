//! nginx access logs: the log_format compiler and the line parser (SPEC §2.1).
