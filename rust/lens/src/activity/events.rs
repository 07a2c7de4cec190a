//! The device event log: per window, a bounded list of timed KERNEL, COMMUNICATION and HCCL
//! records (besides the histograms), so a trace viewer can draw kernels on device lanes and
//! multi-rank tools can line up collective instances across ranks. Filled by the drain thread
//! only; the complete callback never sees it.

use std::collections::HashMap;

/// The `kind` column's values, by `Event::kind` (defined once; Python reads them from here).
pub const EVENT_KINDS: [&str; 3] = ["kernel", "communication", "hccl"];
pub const EVENT_KERNEL: u8 = 0;
pub const EVENT_COMMUNICATION: u8 = 1;
pub const EVENT_HCCL: u8 = 2;

/// Events kept per window unless the session says otherwise.
pub const DEFAULT_CAP: usize = 65536;
/// The largest cap a session may ask for (about 1 GiB of events at the worst).
pub const MAX_CAP: usize = 1 << 24;

/// One record. `name` and `group` index a string table: the drain's interned names while
/// collecting, an `EventLog`'s own `strings` after a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: u8,
    pub name: u32,
    /// The communicator (None for kernels).
    pub group: Option<u32>,
    pub device: u32,
    pub stream: u32,
    /// HCCL records carry none: 0.
    pub correlation: u64,
    /// Collectives: the 0-based instance of this (kind, group, name) since the session started.
    pub sequence: Option<u64>,
    pub start: u64,
    pub end: u64,
    pub bytes: Option<u64>,
    /// COMMUNICATION records: their `dataType` (None for kernels and HCCL records).
    pub data_type: Option<u32>,
}

/// The events of one window with their names: as delivered after a snapshot (ordering a window
/// of up to `cap` events is left to whoever reads them: `by_start`), ordered by start after a
/// `concat`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventLog {
    pub strings: Vec<String>,
    pub events: Vec<Event>,
}

/// Builds an `EventLog`'s string table.
#[derive(Default)]
pub struct Strings {
    index: HashMap<String, u32>,
    strings: Vec<String>,
}

impl Strings {
    pub fn intern(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.strings.len() as u32;
        self.strings.push(s.to_owned());
        self.index.insert(s.to_owned(), i);
        i
    }

    pub fn into_log(self, mut events: Vec<Event>) -> EventLog {
        // Stable: records that start together keep their delivery order.
        events.sort_by_key(|e| e.start);
        EventLog { strings: self.strings, events }
    }
}

impl EventLog {
    /// Events whose ids are the drain's names, resolved through `name`, in delivery order. Every
    /// snapshot does this for a whole window, so it stays one pass: the drain's ids are dense
    /// (interned in order), so a table maps them, not a hash per event.
    pub fn resolve<'a>(events: &[Event], name: impl Fn(u32) -> &'a str) -> EventLog {
        let mut s = Strings::default();
        let mut memo: Vec<u32> = Vec::new();
        let mut map = |id: u32, s: &mut Strings| {
            let i = id as usize;
            if i >= memo.len() {
                memo.resize(i + 1, u32::MAX);
            }
            if memo[i] == u32::MAX {
                memo[i] = s.intern(name(id));
            }
            memo[i]
        };
        let out = events
            .iter()
            .map(|e| Event { name: map(e.name, &mut s), group: e.group.map(|g| map(g, &mut s)), ..*e })
            .collect();
        EventLog { strings: s.strings, events: out }
    }

    /// Indices of the events ordered by start, then delivery order.
    pub fn by_start(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.events.len()).collect();
        order.sort_by_key(|&i| self.events[i].start);
        order
    }

    pub fn name(&self, id: u32) -> &str {
        self.strings.get(id as usize).map_or("", String::as_str)
    }

    /// Both logs' events in one, ordered by start (the merge of two snapshots).
    pub fn concat(&self, other: &EventLog) -> EventLog {
        let mut s = Strings::default();
        let mut out = Vec::with_capacity(self.events.len() + other.events.len());
        for log in [self, other] {
            let ids: Vec<u32> = log.strings.iter().map(|x| s.intern(x)).collect();
            let at = |i: u32| ids.get(i as usize).copied().unwrap_or(0);
            out.extend(log.events.iter().map(|e| Event { name: at(e.name), group: e.group.map(at), ..*e }));
        }
        s.into_log(out)
    }
}

/// The collector's side: the current window's events, the cap, and the per-(kind, group, name)
/// sequence numbers, which outlive window resets.
#[derive(Debug)]
pub struct Recorder {
    pub cap: usize,
    pub events: Vec<Event>,
    /// Events past the cap in this window.
    pub dropped: u64,
    sequences: HashMap<(u8, u32, u32), u64>,
}

impl Default for Recorder {
    fn default() -> Recorder {
        Recorder::new(DEFAULT_CAP)
    }
}

impl Recorder {
    pub fn new(cap: usize) -> Recorder {
        Recorder { cap, events: Vec::new(), dropped: 0, sequences: HashMap::new() }
    }

    /// Log one record (with a sequence number if it is a collective). With cap 0 the log is off:
    /// nothing is kept, numbered or counted.
    #[inline]
    pub fn log(&mut self, mut e: Event) {
        if self.cap == 0 {
            return;
        }
        if let Some(g) = e.group {
            let n = self.sequences.entry((e.kind, g, e.name)).or_insert(0);
            e.sequence = Some(*n);
            *n += 1;
        }
        if self.events.len() < self.cap {
            self.events.push(e);
        } else {
            self.dropped += 1;
        }
    }

    /// Log a record that is not a collective (no sequence number), built only if it is kept.
    #[inline]
    pub fn log_with(&mut self, e: impl FnOnce() -> Event) {
        if self.cap == 0 {
            return;
        }
        if self.events.len() < self.cap {
            self.events.push(e());
        } else {
            self.dropped += 1;
        }
    }

    /// The window's events (and its dropped count) handed over; the next window starts empty.
    pub fn take_window(&mut self) -> (Vec<Event>, u64) {
        (std::mem::take(&mut self.events), std::mem::take(&mut self.dropped))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coll(name: u32, group: u32, start: u64) -> Event {
        Event {
            kind: EVENT_HCCL,
            name,
            group: Some(group),
            device: 0,
            stream: 1,
            correlation: 0,
            sequence: None,
            start,
            end: start + 10,
            bytes: Some(8),
            data_type: None,
        }
    }

    #[test]
    fn sequences_count_per_group_and_name_across_windows_and_the_cap_counts_the_rest() {
        let mut r = Recorder::new(3);
        for (i, (n, g)) in [(1, 7), (1, 7), (2, 7), (1, 8), (1, 7)].into_iter().enumerate() {
            r.log(coll(n, g, i as u64));
        }
        let (ev, dropped) = r.take_window();
        let seq: Vec<_> = ev.iter().map(|e| e.sequence).collect();
        assert_eq!((seq, dropped), (vec![Some(0), Some(1), Some(0)], 2));
        r.log(coll(1, 7, 9));
        let (ev, dropped) = r.take_window();
        assert_eq!((ev[0].sequence, dropped), (Some(3), 0), "not reset by the window");
        let mut off = Recorder::new(0);
        off.log(coll(1, 7, 0));
        assert_eq!(off.take_window(), (vec![], 0));
    }

    #[test]
    fn concat_keeps_every_event_with_its_names_ordered_by_start() {
        let names = ["", "AllReduce", "g", "Bcast"];
        let a = EventLog::resolve(&[coll(1, 2, 30), coll(3, 2, 10)], |i| names[i as usize]);
        let b = EventLog::resolve(&[coll(3, 2, 20)], |i| names[i as usize]);
        let order: Vec<_> = a.by_start().into_iter().map(|i| a.events[i].start).collect();
        assert_eq!(order, vec![10, 30], "resolved in delivery order, read by start");
        let m = a.concat(&b);
        let names: Vec<_> = m.events.iter().map(|e| (m.name(e.name), e.start)).collect();
        assert_eq!(names, vec![("Bcast", 10), ("Bcast", 20), ("AllReduce", 30)]);
        assert!(m.events.iter().all(|e| m.name(e.group.unwrap()) == "g"));
    }
}
