//! Judges.
