//! Byte counts cross between `u64` (the width snapshots, images and files
//! store) and `usize` (what slices and syscalls take). thaw builds only for
//! 64-bit targets, where the two are the same width, so the conversion is
//! one named function rather than an `as` cast that might truncate.

const _: () = assert!(usize::BITS == u64::BITS, "thaw needs a 64-bit target");

/// `n` as a `usize`: lossless, since `usize` is 64 bits (asserted above).
#[allow(clippy::cast_possible_truncation)] // usize is 64 bits: asserted above
pub const fn usize_of(n: u64) -> usize {
    n as usize
}

/// [`crate::PAGE_SIZE`] as a buffer length.
pub const PAGE_LEN: usize = usize_of(crate::PAGE_SIZE);
