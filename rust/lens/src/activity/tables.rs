//! Bounded tables of native histograms, keyed by small tuples of interned names: the activity
//! side's equivalent of the shards. One writer (whoever drains, under the collector's lock).

use crate::core::hist::Histogram;

use super::names::{FastMap as HashMap, OTHER};

/// A key: three interned ids or small values; each table says what they mean.
pub type Key = (u32, u32, u32);

/// One row: a duration histogram and, where a table has one, a second distribution (bandwidth
/// in MB/s, or bytes) and a byte total.
#[derive(Clone, Debug, Default)]
pub struct Row {
    pub hist: Histogram,
    pub second: Option<Histogram>,
    pub bytes: u64,
}

/// Keys of the last records, by `key.0` (a name id): a record of a recently seen key finds its
/// row without hashing.
const MEMO: usize = 64;

#[derive(Clone, Debug)]
pub struct Table {
    rows: Vec<(Key, Row)>,
    index: HashMap<Key, usize>,
    /// (key, its row, whether that is the "(other)" row).
    memo: [(Key, usize, bool); MEMO],
    pub cap: usize,
    /// Records that went into the "(other)" row because the table was full.
    pub into_other: u64,
}

impl Default for Table {
    fn default() -> Table {
        Table::new(OTHER_KEYS)
    }
}

impl Table {
    pub fn new(cap: usize) -> Table {
        Table {
            rows: Vec::new(),
            index: HashMap::default(),
            memo: [((u32::MAX, 0, 0), 0, false); MEMO],
            cap,
            into_other: 0,
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Key, &Row)> {
        self.rows.iter().map(|(k, r)| (k, r))
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The row of `key`, or of `(OTHER, 0, key.2)` once the table holds `cap` keys.
    #[inline]
    pub fn row(&mut self, key: Key) -> &mut Row {
        let (i, other) = self.row_index(key);
        self.row_at(i, other)
    }

    /// The index of `key`'s row (see `row`), for `row_at`, and whether it is the "(other)" row
    /// (`row_at` counts a record that goes there).
    #[inline]
    pub fn row_index(&mut self, key: Key) -> (usize, bool) {
        let m = self.memo[key.0 as usize % MEMO];
        if m.0 == key {
            return (m.1, m.2);
        }
        self.find(key)
    }

    #[inline(never)]
    fn find(&mut self, key: Key) -> (usize, bool) {
        let (i, other) = match self.index.get(&key) {
            Some(&i) => (i, false),
            None if self.rows.len() >= self.cap => {
                let other = (OTHER, 0, key.2);
                let i = match self.index.get(&other) {
                    Some(&i) => i,
                    None => self.insert(other),
                };
                (i, true)
            }
            None => (self.insert(key), false),
        };
        self.memo[key.0 as usize % MEMO] = (key, i, other);
        (i, other)
    }

    /// The row at `i`, from `row_index` on this table (indices stay valid: rows are never
    /// removed); `other` as `row_index` said: a record for the "(other)" row counts there.
    #[inline]
    pub fn row_at(&mut self, i: usize, other: bool) -> &mut Row {
        self.into_other += u64::from(other);
        &mut self.rows[i].1
    }

    fn insert(&mut self, key: Key) -> usize {
        self.rows.push((key, Row::default()));
        self.index.insert(key, self.rows.len() - 1);
        self.rows.len() - 1
    }

    #[inline]
    pub fn record(&mut self, key: Key, v: u64) {
        self.row(key).hist.record(v);
    }

    /// Record a duration with a second value (bandwidth or bytes).
    pub fn record2(&mut self, key: Key, v: u64, second: Option<u64>, bytes: u64) {
        let r = self.row(key);
        r.hist.record(v);
        if let Some(s) = second {
            r.second.get_or_insert_with(Histogram::default).record(s);
        }
        r.bytes = r.bytes.saturating_add(bytes);
    }

    pub fn merge(&mut self, o: &Table) {
        for (k, r) in o.iter() {
            let m = match self.index.get(k) {
                Some(&i) => &mut self.rows[i].1,
                None => {
                    let i = self.insert(*k);
                    &mut self.rows[i].1
                }
            };
            m.hist.merge(&r.hist);
            if let Some(s) = &r.second {
                m.second.get_or_insert_with(Histogram::default).merge(s);
            }
            m.bytes = m.bytes.saturating_add(r.bytes);
        }
        self.into_other += o.into_other;
    }
}

/// Per launch function: API time (the span), queue delay (ENTER to kernel start) and kernel
/// time, as nsys's `cuda_kern_exec_sum`.
#[derive(Clone, Debug, Default)]
pub struct LaunchRow {
    pub api: Histogram,
    pub queue: Histogram,
    pub kernel: Histogram,
}

/// Keys of the last launch rows found, by name id: a kernel of a recently seen launch function
/// finds its row without hashing (the join records three histograms per launch).
const LAUNCH_MEMO: usize = 16;

#[derive(Clone, Debug)]
pub struct Launches {
    /// ((function name id, join source), row), in order of first use.
    rows: Vec<((u32, u32), LaunchRow)>,
    index: HashMap<(u32, u32), usize>,
    memo: [((u32, u32), usize); LAUNCH_MEMO],
}

impl Default for Launches {
    fn default() -> Launches {
        Launches {
            rows: Vec::new(),
            index: HashMap::default(),
            memo: [((u32::MAX, u32::MAX), 0); LAUNCH_MEMO],
        }
    }
}

impl Launches {
    #[inline]
    pub fn row(&mut self, name: u32, source: u32) -> &mut LaunchRow {
        let key = (name, source);
        let m = self.memo[name as usize % LAUNCH_MEMO];
        if m.0 == key {
            return &mut self.rows[m.1].1;
        }
        let i = self.find(key);
        self.memo[name as usize % LAUNCH_MEMO] = (key, i);
        &mut self.rows[i].1
    }

    #[inline(never)]
    fn find(&mut self, key: (u32, u32)) -> usize {
        match self.index.get(&key) {
            Some(&i) => i,
            None => {
                self.rows.push((key, LaunchRow::default()));
                self.index.insert(key, self.rows.len() - 1);
                self.rows.len() - 1
            }
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&(u32, u32), &LaunchRow)> {
        self.rows.iter().map(|(k, r)| (k, r))
    }

    pub fn merge(&mut self, o: &Launches) {
        for (k, r) in o.iter() {
            let m = self.row(k.0, k.1);
            m.api.merge(&r.api);
            m.queue.merge(&r.queue);
            m.kernel.merge(&r.kernel);
        }
    }
}

/// Join sources (the `source` of a launches row).
pub const JOIN_RUNTIME_API: u32 = 0;
pub const JOIN_EXTERNAL: u32 = 1;
pub const JOIN_MARKS: u32 = 2;
pub const JOIN_SOURCES: [&str; 3] = ["runtime_api", "external_correlation", "mstx_marks"];

/// Collective sources (third key of the collectives table).
pub const COLL_HCCL: u32 = 0;
pub const COLL_COMMUNICATION: u32 = 1;
pub const COLL_MSTX_DEVICE: u32 = 2;
pub const COLL_MSTX_HOST: u32 = 3;
pub const COLL_SOURCES: [&str; 4] = ["hccl", "communication", "mstx_device", "mstx_host"];

/// Range sources (third key of the ranges table).
pub const RANGE_HOST: u32 = 0;
pub const RANGE_DEVICE: u32 = 1;

/// Keys per table before the "(other)" row takes the rest.
pub const KERNEL_KEYS: usize = 512;
pub const OTHER_KEYS: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_record_past_a_full_table_counts_in_the_other_row_memo_or_not() {
        let mut t = Table::new(1);
        t.record((5, 0, 0), 10);
        // Key 6 does not fit: each of its records goes to "(other)" and is counted, including
        // the ones found through the memo, and through a row index kept by the caller.
        t.record((6, 0, 0), 20);
        t.record((6, 0, 0), 30);
        let (i, other) = t.row_index((6, 0, 0));
        assert!(other);
        t.row_at(i, other).hist.record(40);
        assert_eq!(t.into_other, 3);
        let rows: Vec<_> = t.iter().map(|(k, r)| (*k, r.hist.count())).collect();
        assert_eq!(rows, vec![((5, 0, 0), 1), ((OTHER, 0, 0), 3)]);
        // A key that fits is never counted there.
        let (i, other) = t.row_index((5, 0, 0));
        t.row_at(i, other).hist.record(50);
        assert_eq!(t.into_other, 3);
    }
}
