//! The segment format: framing a record, and reading a segment's records back up to the first
//! damage.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use atdp_schema::Record;

/// The magic of segments this writer writes: records of protocol version 1.1.
pub(super) const MAGIC: &[u8; 8] = b"ATDPWAL2";
/// The magic of the first format, read through [`super::legacy`].
pub(super) const LEGACY_MAGIC: &[u8; 8] = b"ATDPWAL1";
pub(super) const FRAME_HEADER: usize = 8;
/// Larger frames are taken as corruption of the length field.
const MAX_RECORD_BYTES: usize = 256 << 20;

/// What is wrong with a segment, found while reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The segment file.
    pub path: PathBuf,
    /// Byte offset of the first unreadable record.
    pub offset: u64,
    /// Whether the file just ends inside a record (a write cut by a crash) or holds bytes
    /// that fail their checksum or decoding (corruption).
    pub kind: DamageKind,
    /// Records read intact before the damage.
    pub intact_records: usize,
    /// Bytes after the last intact record, which are lost.
    pub lost_bytes: u64,
}

/// The two kinds of segment damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DamageKind {
    /// The file ends inside a record: the write was cut (crash); the record was never acknowledged.
    TornTail,
    /// A record fails its CRC, has an impossible length, or does not decode.
    Corrupt,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.kind {
            DamageKind::TornTail => "ends inside a record",
            DamageKind::Corrupt => "has a corrupt record",
        };
        write!(
            f,
            "{} {what} at byte {}: {} records before it kept, {} bytes after it lost",
            self.path.display(),
            self.offset,
            self.intact_records,
            self.lost_bytes
        )
    }
}

/// The records of one segment, up to the first damage.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct SegmentScan {
    pub records: Vec<Record>,
    pub damage: Option<Damage>,
}

/// Frames one record: header then payload.
pub(super) fn frame(record: &Record) -> Result<Vec<u8>> {
    frame_into(record, Vec::new())
}

/// Frames one record into `buf` (cleared first), reusing its allocation.
pub(super) fn frame_into(record: &Record, mut buf: Vec<u8>) -> Result<Vec<u8>> {
    buf.clear();
    buf.extend_from_slice(&[0u8; FRAME_HEADER]);
    let framed = postcard::to_extend(record, buf).map_err(|e| Error::Encode(e.to_string()))?;
    let payload_len = framed.len() - FRAME_HEADER;
    if payload_len > MAX_RECORD_BYTES {
        return Err(Error::Encode(format!(
            "record of {payload_len} bytes is over the {MAX_RECORD_BYTES}-byte limit"
        )));
    }
    let mut framed = framed;
    let crc = crc32fast::hash(&framed[FRAME_HEADER..]);
    // The length fits: it was checked against MAX_RECORD_BYTES above.
    framed[0..4].copy_from_slice(&(payload_len as u32).to_le_bytes());
    framed[4..8].copy_from_slice(&crc.to_le_bytes());
    Ok(framed)
}

/// Reads a segment and hands each record, with the size of its encoding, to `each`, up to the
/// first damage, which it returns.
/// The file is read through a small buffer, a record at a time: memory is one record (in
/// `payload`, whose allocation is reused from segment to segment), not the segment.
pub(crate) fn scan_segment_with(
    path: &Path,
    payload: &mut Vec<u8>,
    each: impl FnMut(Record, usize),
) -> Result<Option<Damage>> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let reader = std::io::BufReader::with_capacity(READ_BUFFER, file);
    scan_reader(path, reader, len, payload, each).map_err(|e| Error::io(path, e))
}

/// Bytes of a segment read from the file at a time.
const READ_BUFFER: usize = 1 << 20;

#[cfg(test)]
pub(super) fn scan_bytes(path: &Path, data: &[u8]) -> SegmentScan {
    let mut records = Vec::new();
    let damage = scan_reader(
        path,
        data,
        data.len() as u64,
        &mut Vec::new(),
        |record, _| records.push(record),
    )
    .unwrap_or_else(|e| panic!("reading from memory cannot fail: {e}"));
    SegmentScan { records, damage }
}

/// Reads into `buf` until it is full or the input ends; the bytes read.
fn read_up_to(reader: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Whether the rest of the input is zeros (a crashed write's tail that a file system left
/// zero-filled).
fn rest_is_zero(reader: &mut impl Read) -> std::io::Result<bool> {
    let mut chunk = [0u8; 8192];
    loop {
        let n = read_up_to(reader, &mut chunk)?;
        if chunk[..n].iter().any(|b| *b != 0) {
            return Ok(false);
        }
        if n < chunk.len() {
            return Ok(true);
        }
    }
}

/// Hands each intact record of a segment of `len` bytes, read from `reader`, to `each`, up
/// to the first damage, which it returns.
fn scan_reader(
    path: &Path,
    mut reader: impl Read,
    len: u64,
    payload: &mut Vec<u8>,
    mut each: impl FnMut(Record, usize),
) -> std::io::Result<Option<Damage>> {
    let damage = |offset: u64, kind, intact| Damage {
        path: path.to_owned(),
        offset,
        kind,
        intact_records: intact,
        lost_bytes: len.saturating_sub(offset),
    };
    let mut magic = [0u8; MAGIC.len()];
    let read = read_up_to(&mut reader, &mut magic)?;
    if read < MAGIC.len() {
        // A segment created but cut before its magic was written holds nothing.
        let kind = if MAGIC.starts_with(&magic[..read]) {
            DamageKind::TornTail
        } else {
            DamageKind::Corrupt
        };
        return Ok((read > 0).then(|| damage(0, kind, 0)));
    }
    let legacy = &magic == LEGACY_MAGIC;
    if &magic != MAGIC && !legacy {
        return Ok(Some(damage(0, DamageKind::Corrupt, 0)));
    }
    let mut offset = MAGIC.len() as u64;
    let mut intact = 0;
    loop {
        let mut header = [0u8; FRAME_HEADER];
        match read_up_to(&mut reader, &mut header)? {
            0 => return Ok(None),
            n if n < FRAME_HEADER => {
                return Ok(Some(damage(offset, DamageKind::TornTail, intact)));
            }
            _ => {}
        }
        let size = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        if size > MAX_RECORD_BYTES {
            return Ok(Some(damage(offset, DamageKind::Corrupt, intact)));
        }
        payload.clear();
        let read = (&mut reader).take(size as u64).read_to_end(payload)?;
        if read < size {
            return Ok(Some(damage(offset, DamageKind::TornTail, intact)));
        }
        let decoded = (crc32fast::hash(payload) == crc)
            .then(|| match legacy {
                true => super::legacy::decode(payload),
                false => postcard::from_bytes::<Record>(payload).ok(),
            })
            .flatten();
        match decoded {
            Some(record) => {
                each(record, size);
                intact += 1;
            }
            None => {
                // File systems may leave a crashed write's tail zero-filled: a torn write,
                // not corruption.
                let zeros = header.iter().chain(payload.iter()).all(|b| *b == 0)
                    && rest_is_zero(&mut reader)?;
                let kind = if zeros {
                    DamageKind::TornTail
                } else {
                    DamageKind::Corrupt
                };
                return Ok(Some(damage(offset, kind, intact)));
            }
        }
        offset += (FRAME_HEADER + size) as u64;
    }
}
