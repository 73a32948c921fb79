//! Chapter 07.
