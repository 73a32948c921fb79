//! The JSON reader and writer chapter 9's files use; it lives in the core as [`crate::json`]
//! (chapter 8's `vocab.json` loader reads with it too). Re-exported here so paths written
//! against this chapter keep working.

pub use crate::json::*;
