//! Chapter 06.
