//! # overtime-diagnose
