//! The segment format: framing a record, and reading a segment's records back up to the first
//! damage.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::record::Record;

pub(super) const MAGIC: &[u8; 8] = b"ATDPWAL1";
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

/// Reads a segment into `buf` (cleared first; its allocation is reused, so a writer that
/// scans segment after segment does not fault in fresh memory for each) and hands each
/// record to `each`, up to the first damage, which it returns.
pub(crate) fn scan_segment_with(
    path: &Path,
    buf: &mut Vec<u8>,
    each: impl FnMut(Record),
) -> Result<Option<Damage>> {
    use std::io::Read;
    buf.clear();
    File::open(path)
        .and_then(|mut file| file.read_to_end(buf))
        .map_err(|e| Error::io(path, e))?;
    Ok(scan_bytes_with(path, buf, each))
}

#[cfg(test)]
pub(super) fn scan_bytes(path: &Path, data: &[u8]) -> SegmentScan {
    let mut records = Vec::new();
    let damage = scan_bytes_with(path, data, |record| records.push(record));
    SegmentScan { records, damage }
}

/// Hands each intact record of a segment's bytes to `each`, up to the first damage, which it
/// returns.
fn scan_bytes_with(path: &Path, data: &[u8], mut each: impl FnMut(Record)) -> Option<Damage> {
    let damage = |offset: usize, kind, intact| Damage {
        path: path.to_owned(),
        offset: offset as u64,
        kind,
        intact_records: intact,
        lost_bytes: (data.len() - offset) as u64,
    };
    if data.len() < MAGIC.len() {
        // A segment created but cut before its magic was written holds nothing.
        let kind = if MAGIC.starts_with(data) {
            DamageKind::TornTail
        } else {
            DamageKind::Corrupt
        };
        return (!data.is_empty()).then(|| damage(0, kind, 0));
    }
    if &data[..MAGIC.len()] != MAGIC {
        return Some(damage(0, DamageKind::Corrupt, 0));
    }
    let mut offset = MAGIC.len();
    let mut intact = 0;
    while offset < data.len() {
        let rest = &data[offset..];
        if rest.len() < FRAME_HEADER {
            return Some(damage(offset, DamageKind::TornTail, intact));
        }
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let crc = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
        if len > MAX_RECORD_BYTES {
            return Some(damage(offset, DamageKind::Corrupt, intact));
        }
        if rest.len() - FRAME_HEADER < len {
            return Some(damage(offset, DamageKind::TornTail, intact));
        }
        let payload = &rest[FRAME_HEADER..FRAME_HEADER + len];
        let decoded = (crc32fast::hash(payload) == crc)
            .then(|| postcard::from_bytes::<Record>(payload).ok())
            .flatten();
        match decoded {
            Some(record) => {
                each(record);
                intact += 1;
            }
            None => {
                // File systems may leave a crashed write's tail zero-filled: a torn write,
                // not corruption.
                let kind = if rest.iter().all(|b| *b == 0) {
                    DamageKind::TornTail
                } else {
                    DamageKind::Corrupt
                };
                return Some(damage(offset, kind, intact));
            }
        }
        offset += FRAME_HEADER + len;
    }
    None
}
