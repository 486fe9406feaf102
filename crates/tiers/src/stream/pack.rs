//! The first pack's form: the REAP working set's files and the chunks the
//! restorer copies before resume, as `thaw snapshot move` writes them to
//! the remote tier and a stream reads them back, checked.
use super::WORKING_SET;
use crate::error::{Result, TiersError};
use thaw_error::{fail, ResultExt};
use thaw_memory::usize_of;

/// The image's chunks a restore copies before resume: those holding a
/// file-backed region's saved (private) pages, and the saved files of
/// /tmp and /dev/shm; sorted.
pub fn restorer_chunks(
    state: &thaw_snapshot_format::ProcessState,
    chunk: u64,
    chunks: u64,
) -> Vec<u64> {
    let pages = state
        .memory
        .regions
        .iter()
        .filter(|r| !r.anonymous)
        .flat_map(|r| &r.runs)
        .map(|run| (run.file_off, run.len));
    let files = state.files.iter().map(|f| (f.image_off, f.len));
    let mut before: Vec<u64> = pages
        .chain(files)
        .filter(|&(_, len)| len > 0)
        .flat_map(|(off, len)| off / chunk..off.saturating_add(len).div_ceil(chunk))
        .filter(|&c| c < chunks)
        .collect();
    before.sort_unstable();
    before.dedup();
    before
}

/// Bytes of chunk `i` of an image of `len` bytes.
pub(super) fn chunk_len(i: u64, chunk: u64, len: u64) -> usize {
    usize_of(len.min((i + 1) * chunk) - (i * chunk).min(len))
}

/// [`FIRST_PACK`]'s plaintext, each length little-endian in front of what
/// it counts: the manifest id it belongs to; the working set's files (name,
/// bytes); the restorer's chunk list; those chunks' bytes.
pub fn first_pack(
    id: &str,
    files: &[(String, Vec<u8>)],
    chunks: &[u64],
    chunk: u64,
    image: &[u8],
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut put = |b: &[u8]| {
        out.extend_from_slice(&(b.len() as u64).to_le_bytes());
        out.extend_from_slice(b);
    };
    put(id.as_bytes());
    put(&(files.len() as u64).to_le_bytes());
    for (f, data) in files {
        put(f.as_bytes());
        put(data);
    }
    let list: Vec<u8> = chunks.iter().flat_map(|c| c.to_le_bytes()).collect();
    put(&list);
    let mut data = Vec::new();
    for &c in chunks {
        let s = usize_of(c * chunk);
        data.extend_from_slice(&image[s..s + chunk_len(c, chunk, image.len() as u64)]);
    }
    put(&data);
    out
}

/// A parsed [`first_pack`]: the working set's files and the chunks' bytes.
pub(super) struct Pack<'a> {
    pub(super) files: Vec<(&'a [u8], &'a [u8])>,
    pub(super) chunks: &'a [u8],
}

/// Parses a [`first_pack`], checked to be for manifest `id` and exactly the
/// chunk list `want` of an image of `len` bytes (so an older upload's pack
/// is refused, not restored). The files are checked by the caller.
pub(super) fn parse_first_pack<'a>(
    raw: &'a [u8],
    id: &str,
    want: &[u64],
    chunk: u64,
    len: u64,
) -> Result<Pack<'a>> {
    let mut at = 0usize;
    let mut take = || -> Result<&'a [u8]> {
        let truncated = || TiersError::Corrupt("truncated".into());
        let n = raw.get(at..at + 8).ok_or_else(truncated)?;
        let n = u64::from_le_bytes(n.try_into().expect("8 bytes"));
        let end = usize::try_from(n)
            .ok()
            .and_then(|n| (at + 8).checked_add(n))
            .ok_or_else(truncated)?;
        let b = raw.get(at + 8..end).ok_or_else(truncated)?;
        at = end;
        Ok(b)
    };
    if take()? != id.as_bytes() {
        fail!(
            TiersError::Corrupt,
            "made for another version of the snapshot"
        );
    }
    let n = u64::from_le_bytes(take()?.try_into().context("bad file count")?);
    if n > WORKING_SET.len() as u64 {
        fail!(TiersError::Corrupt, "holds {n} files");
    }
    let files = (0..n)
        .map(|_| Ok((take()?, take()?)))
        .collect::<Result<Vec<_>>>()?;
    let list: Vec<u8> = want.iter().flat_map(|c| c.to_le_bytes()).collect();
    if take()? != list.as_slice() {
        fail!(
            TiersError::Corrupt,
            "holds other chunks than the restorer copies"
        );
    }
    let chunks = take()?;
    let total: usize = want.iter().map(|&i| chunk_len(i, chunk, len)).sum();
    if chunks.len() != total || at != raw.len() {
        fail!(
            TiersError::Corrupt,
            "holds {} bytes of chunks, not {total}",
            chunks.len()
        );
    }
    Ok(Pack { files, chunks })
}
