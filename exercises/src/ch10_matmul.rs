//! Chapter 10.
