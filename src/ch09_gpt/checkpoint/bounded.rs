//! The one bounded read of a checkpoint's files: [`read_config`](super::read_config) and the
//! workshop's budgeted reads ([`crate::workshop::budget::read_file`]) both go through it.

use super::io_error;
use crate::error::Result;
use std::path::Path;

/// What [`read_at_most`] found past its limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TooLong {
    /// A regular file of this many bytes: refused from its size, before a byte was read.
    File(u64),
    /// Not a regular file (a pipe, `/dev/zero`): more than the limit was there to read.
    Stream,
}

/// The bytes of the file at `path` when it holds at most `limit` of them: a regular file's size
/// is checked before a byte is read; anything else (a pipe, `/dev/zero`) is read up to `limit`
/// and one byte more. `Ok(Err(…))` says what lay past the limit.
pub fn read_at_most(path: &Path, limit: u64) -> Result<std::result::Result<Vec<u8>, TooLong>> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| io_error(path, e))?;
    let meta = file.metadata().map_err(|e| io_error(path, e))?;
    if meta.is_file() && meta.len() > limit {
        return Ok(Err(TooLong::File(meta.len())));
    }
    let mut bytes = Vec::with_capacity(if meta.is_file() { meta.len() as usize } else { 0 });
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes).map_err(|e| io_error(path, e))?;
    if bytes.len() as u64 > limit {
        return Ok(Err(TooLong::Stream));
    }
    Ok(Ok(bytes))
}
