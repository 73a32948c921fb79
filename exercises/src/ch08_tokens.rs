//! Chapter 08.
