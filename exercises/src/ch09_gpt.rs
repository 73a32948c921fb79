//! Chapter 09.
