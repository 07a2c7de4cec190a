//! Activity records as they lie in a completed buffer: packed structs laid back to back, each
//! exactly its kind's size (docs/reference.md, Activity records), 64-bit fields at odd offsets, so every field is
//! read unaligned from its reference offset. We walk the buffer ourselves instead of calling
//! `msptiActivityGetNextRecord` per record: no MSPTI call per record, and no exposure to its
//! thread-local offset (a stale offset would start the next buffer mid-record).

use super::layout as abi;

/// A record's fields that the collector uses (pointers are kept as addresses: they are only
/// dereferenced where the reference says the library fills them).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Record {
    Marker {
        flag: u32,
        source: u32,
        timestamp: u64,
        id: u64,
        obj: (u32, u32),
        name: usize,
        domain: usize,
    },
    Kernel {
        start: u64,
        end: u64,
        device: u32,
        stream: u32,
        correlation: u64,
        kind_name: usize,
        name: usize,
    },
    /// API, ACL_API, NODE_API and RUNTIME_API share one layout.
    Api {
        kind: u32,
        start: u64,
        end: u64,
        pid: u32,
        tid: u32,
        correlation: u64,
        name: usize,
    },
    Hccl {
        start: u64,
        end: u64,
        device: u32,
        stream: u32,
        bandwidth: f64,
        name: usize,
        comm: usize,
    },
    Memory {
        op: u32,
        memory_kind: u32,
        correlation: u64,
        start: u64,
        end: u64,
        bytes: u64,
    },
    Memset {
        bytes: u64,
        start: u64,
        end: u64,
        correlation: u64,
    },
    Memcpy {
        copy_kind: u32,
        bytes: u64,
        start: u64,
        end: u64,
        correlation: u64,
    },
    ExternalCorrelation {
        external_kind: u32,
        external_id: u64,
        correlation: u64,
    },
    /// A kind with a known size that the collector does not aggregate (OVERHEAD).
    Other(u32),
    Communication {
        data_type: u32,
        count: u64,
        device: u32,
        stream: u32,
        start: u64,
        end: u64,
        name: usize,
        comm: usize,
        correlation: u64,
    },
}

/// Why the rest of a buffer was skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bad {
    /// A kind this build does not know: its size is unknown, so nothing after it can be found.
    UnknownKind(u32),
    /// A record that runs past the buffer's valid size.
    Truncated,
}

/// Record sizes per kind (index = kind value), from the ABI table; the library's own
/// `msptiActivityGetStructSize` may override an entry where it exists.
#[derive(Clone, Copy, Debug)]
pub struct Sizes(pub [usize; abi::KIND_COUNT as usize]);

impl Default for Sizes {
    fn default() -> Sizes {
        let mut s = [0; abi::KIND_COUNT as usize];
        for (k, v) in s.iter_mut().enumerate() {
            *v = abi::record_size(k as u32).unwrap_or(0);
        }
        Sizes(s)
    }
}

#[inline(always)]
fn u32_at(b: &[u8], o: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[o..o + 4]);
    u32::from_le_bytes(a)
}

#[inline(always)]
fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

#[inline(always)]
fn ptr_at(b: &[u8], o: usize) -> usize {
    u64_at(b, o) as usize
}

/// Decode the record at the start of `r` (which holds at least its kind's size). Inlined into
/// the walk and the drain's match on it, so a record's fields go straight where they are used.
#[inline(always)]
fn decode(kind: u32, r: &[u8]) -> Option<Record> {
    // (Option: every kind with a size decodes; the type leaves room for a kind that cannot.)
    use abi::*;
    Some(match kind {
        // The frequent kinds are cut to their struct's size first, so their fields' offsets
        // need no bounds check each (the walk gives at least the kind's size).
        KIND_MARKER => {
            let r = r.get(..MARKER_SIZE)?;
            Record::Marker {
                flag: u32_at(r, MARKER_FLAG),
                source: u32_at(r, MARKER_SOURCE_KIND),
                timestamp: u64_at(r, MARKER_TIMESTAMP),
                id: u64_at(r, MARKER_ID),
                obj: (u32_at(r, MARKER_OBJECT_ID), u32_at(r, MARKER_OBJECT_ID + 4)),
                name: ptr_at(r, MARKER_NAME),
                domain: ptr_at(r, MARKER_DOMAIN),
            }
        }
        KIND_KERNEL => {
            let r = r.get(..KERNEL_SIZE)?;
            Record::Kernel {
                start: u64_at(r, KERNEL_START),
                end: u64_at(r, KERNEL_END),
                device: u32_at(r, KERNEL_DS),
                stream: u32_at(r, KERNEL_DS + 4),
                correlation: u64_at(r, KERNEL_CORRELATION_ID),
                kind_name: ptr_at(r, KERNEL_TYPE),
                name: ptr_at(r, KERNEL_NAME),
            }
        }
        KIND_API | KIND_ACL_API | KIND_NODE_API | KIND_RUNTIME_API => {
            let r = r.get(..API_SIZE)?;
            Record::Api {
                kind,
                start: u64_at(r, API_START),
                end: u64_at(r, API_END),
                pid: u32_at(r, API_PT),
                tid: u32_at(r, API_PT + 4),
                correlation: u64_at(r, API_CORRELATION_ID),
                name: ptr_at(r, API_NAME),
            }
        }
        KIND_HCCL => Record::Hccl {
            start: u64_at(r, HCCL_START),
            end: u64_at(r, HCCL_END),
            device: u32_at(r, HCCL_DS),
            stream: u32_at(r, HCCL_DS + 4),
            bandwidth: f64::from_bits(u64_at(r, HCCL_BANDWIDTH)),
            name: ptr_at(r, HCCL_NAME),
            comm: ptr_at(r, HCCL_COMM_NAME),
        },
        KIND_MEMORY => Record::Memory {
            op: u32_at(r, MEMORY_OPERATION_TYPE),
            memory_kind: u32_at(r, MEMORY_MEMORY_KIND),
            correlation: u64_at(r, MEMORY_CORRELATION_ID),
            start: u64_at(r, MEMORY_START),
            end: u64_at(r, MEMORY_END),
            bytes: u64_at(r, MEMORY_BYTES),
        },
        KIND_MEMSET => Record::Memset {
            bytes: u64_at(r, MEMSET_BYTES),
            start: u64_at(r, MEMSET_START),
            end: u64_at(r, MEMSET_END),
            correlation: u64_at(r, MEMSET_CORRELATION_ID),
        },
        KIND_MEMCPY => Record::Memcpy {
            copy_kind: u32_at(r, MEMCPY_COPY_KIND),
            bytes: u64_at(r, MEMCPY_BYTES),
            start: u64_at(r, MEMCPY_START),
            end: u64_at(r, MEMCPY_END),
            correlation: u64_at(r, MEMCPY_CORRELATION_ID),
        },
        KIND_EXTERNAL_CORRELATION => Record::ExternalCorrelation {
            external_kind: u32_at(r, EXTERNAL_CORRELATION_EXTERNAL_KIND),
            external_id: u64_at(r, EXTERNAL_CORRELATION_EXTERNAL_ID),
            correlation: u64_at(r, EXTERNAL_CORRELATION_CORRELATION_ID),
        },
        KIND_COMMUNICATION => {
            let r = r.get(..COMMUNICATION_SIZE)?;
            Record::Communication {
                data_type: u32_at(r, COMMUNICATION_DATA_TYPE),
                count: u64_at(r, COMMUNICATION_COUNT),
                device: u32_at(r, COMMUNICATION_DS),
                stream: u32_at(r, COMMUNICATION_DS + 4),
                start: u64_at(r, COMMUNICATION_START),
                end: u64_at(r, COMMUNICATION_END),
                name: ptr_at(r, COMMUNICATION_NAME),
                comm: ptr_at(r, COMMUNICATION_COMM_NAME),
                correlation: u64_at(r, COMMUNICATION_CORRELATION_ID),
            }
        }
        _ => Record::Other(kind),
    })
}

/// Every record of a buffer, in order, to its end; a bad record ends the walk (`Err`), as the
/// position of anything after it is unknown.
pub struct Records<'a> {
    buf: &'a [u8],
    off: usize,
    sizes: &'a Sizes,
    skipped: usize,
}

impl<'a> Records<'a> {
    pub fn new(buf: &'a [u8], sizes: &'a Sizes) -> Records<'a> {
        Records { buf, off: 0, sizes, skipped: 0 }
    }
    /// Bytes skipped after a bad record.
    pub fn skipped(&self) -> usize {
        self.skipped
    }

    fn stop(&mut self, bad: Bad) -> Option<Result<Record, Bad>> {
        self.skipped = self.buf.len() - self.off;
        self.off = self.buf.len();
        Some(Err(bad))
    }
}

impl Iterator for Records<'_> {
    type Item = Result<Record, Bad>;

    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        let rest = &self.buf[self.off..];
        if rest.len() < 4 {
            if rest.is_empty() {
                return None;
            }
            return self.stop(Bad::Truncated);
        }
        let kind = u32_at(rest, 0);
        let size = self.sizes.0.get(kind as usize).copied().unwrap_or(0);
        let rec = if size == 0 { None } else { rest.get(..size) };
        let Some(r) = rec else {
            return self.stop(if size == 0 { Bad::UnknownKind(kind) } else { Bad::Truncated });
        };
        match decode(kind, r) {
            Some(rec) => {
                self.off += size;
                Some(Ok(rec))
            }
            None => self.stop(Bad::UnknownKind(kind)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Put `v` at `off` of `b` (little endian), as the reference table places the field.
    fn put(b: &mut [u8], off: usize, v: &[u8]) {
        b[off..off + v.len()].copy_from_slice(v);
    }

    /// Records built byte by byte at the offsets of docs/reference.md's Activity records (numbers
    /// from the reference, not from the ABI crate), with 0xA5 garbage in every byte the kind does
    /// not define.
    #[test]
    fn records_are_read_at_the_reference_offsets() {
        let mut buf = vec![0xA5u8; 56 + 48 + 72 + 56];
        let k = &mut buf[..56];
        put(k, 0, &2u32.to_le_bytes());
        put(k, 4, &1000u64.to_le_bytes());
        put(k, 12, &1700u64.to_le_bytes());
        put(k, 20, &3u32.to_le_bytes());
        put(k, 24, &7u32.to_le_bytes());
        put(k, 28, &42u64.to_le_bytes());
        put(k, 36, &0x1111_2222usize.to_le_bytes());
        put(k, 44, &0x3333_4444usize.to_le_bytes());
        let a = &mut buf[56..104];
        put(a, 0, &12u32.to_le_bytes());
        put(a, 4, &900u64.to_le_bytes());
        put(a, 12, &2000u64.to_le_bytes());
        put(a, 20, &11u32.to_le_bytes());
        put(a, 24, &12345u32.to_le_bytes());
        put(a, 28, &42u64.to_le_bytes());
        put(a, 36, &0x5555_6666usize.to_le_bytes());
        let c = &mut buf[104..176];
        put(c, 0, &9u32.to_le_bytes());
        put(c, 4, &4u32.to_le_bytes());
        put(c, 8, &(1u64 << 20).to_le_bytes());
        put(c, 16, &0u32.to_le_bytes());
        put(c, 20, &9u32.to_le_bytes());
        put(c, 24, &5000u64.to_le_bytes());
        put(c, 32, &9000u64.to_le_bytes());
        put(c, 48, &0x7777usize.to_le_bytes());
        put(c, 56, &0x8888usize.to_le_bytes());
        put(c, 64, &77u64.to_le_bytes());
        let m = &mut buf[176..232];
        put(m, 0, &1u32.to_le_bytes());
        put(m, 4, &16u32.to_le_bytes());
        put(m, 8, &1u32.to_le_bytes());
        put(m, 12, &5555u64.to_le_bytes());
        put(m, 20, &99u64.to_le_bytes());
        put(m, 28, &4u32.to_le_bytes());
        put(m, 32, &7u32.to_le_bytes());
        let sizes = Sizes::default();
        let got: Vec<_> = Records::new(&buf, &sizes).collect();
        assert_eq!(got.len(), 4);
        assert_eq!(
            got[0],
            Ok(Record::Kernel {
                start: 1000,
                end: 1700,
                device: 3,
                stream: 7,
                correlation: 42,
                kind_name: 0x1111_2222,
                name: 0x3333_4444
            })
        );
        assert_eq!(
            got[1],
            Ok(Record::Api {
                kind: 12,
                start: 900,
                end: 2000,
                pid: 11,
                tid: 12345,
                correlation: 42,
                name: 0x5555_6666
            })
        );
        match got[2] {
            Ok(Record::Communication {
                data_type,
                count,
                stream,
                start,
                end,
                name,
                comm,
                correlation,
                ..
            }) => {
                assert_eq!((data_type, count, stream, start, end), (4, 1 << 20, 9, 5000, 9000));
                assert_eq!((name, comm, correlation), (0x7777, 0x8888, 77));
            }
            ref r => panic!("{r:?}"),
        }
        match got[3] {
            Ok(Record::Marker { flag, source, timestamp, id, obj, .. }) => {
                assert_eq!((flag, source, timestamp, id, obj), (16, 1, 5555, 99, (4, 7)));
            }
            ref r => panic!("{r:?}"),
        }
    }

    #[test]
    fn an_unknown_kind_ends_the_buffer_and_says_how_much_was_skipped() {
        let mut buf = vec![0xA5u8; 24 + 40 + 24];
        put(&mut buf, 0, &8u32.to_le_bytes()); // EXTERNAL_CORRELATION, 24 bytes
        put(&mut buf, 24, &77u32.to_le_bytes()); // no such kind
        put(&mut buf, 64, &8u32.to_le_bytes());
        let sizes = Sizes::default();
        let mut it = Records::new(&buf, &sizes);
        assert!(matches!(it.next(), Some(Ok(Record::ExternalCorrelation { .. }))));
        assert_eq!(it.next(), Some(Err(Bad::UnknownKind(77))));
        assert_eq!(it.next(), None);
        assert_eq!(it.skipped(), 40 + 24);
        // A record cut by the buffer's valid size, and a kind whose layout grew (struct size).
        let mut it = Records::new(&buf[..20], &sizes);
        assert_eq!(it.next(), Some(Err(Bad::Truncated)));
        assert_eq!(it.skipped(), 20);
        let mut grown = sizes;
        grown.0[8] = 32;
        let wide = vec![0u8; 64].into_iter().enumerate().map(|(i, b)| if i % 32 == 0 { 8 } else { b });
        let wide: Vec<u8> = wide.collect();
        assert_eq!(Records::new(&wide, &grown).filter(Result::is_ok).count(), 2);
    }

    #[test]
    fn kind_zero_and_huge_kinds_are_unknown_not_a_panic() {
        let sizes = Sizes::default();
        for kind in [0u32, 13 + 1, u32::MAX] {
            let mut buf = vec![0u8; 64];
            put(&mut buf, 0, &kind.to_le_bytes());
            let mut it = Records::new(&buf, &sizes);
            assert_eq!(it.next(), Some(Err(Bad::UnknownKind(kind))), "kind {kind}");
        }
    }
}
