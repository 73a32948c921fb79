//! Chapter 8 (work in progress).
pub mod corpus;
