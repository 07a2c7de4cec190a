//! Records into histograms: the drain's one state (names, tables, the host-device join, the
//! pairing of MSTX marks and ranges), with bounded memory everywhere.

use std::collections::VecDeque;

use super::correlations::ByCorrelation;
use super::counters::{ActivityCounter as D, ActivityCounts};
use super::events::{Event, Recorder, EVENT_COMMUNICATION, EVENT_HCCL, EVENT_KERNEL};
use super::launch_hooks::{self as hook, Span};
use super::layout as abi;
use super::names::{json_string, FastMap as HashMap, Names, EMPTY};
use super::records::{Bad, Record, Records, Sizes};
use super::span_queue::SpanQueue;
use super::tables::*;

/// Pending entries (ranges, marks, kernels waiting for their API, correlation links) kept at
/// most; the oldest beyond are given up and counted.
pub const PENDING_CAP: usize = 1 << 16;
/// Correlation ids remembered for joining later kernels (graph replays reuse them).
pub const CORRELATION_CAP: usize = 1 << 18;
/// Spans kept per thread for containment at most. Spans leave as soon as the thread's API
/// records have passed them (records of one thread arrive in time order), so this only bounds a
/// thread whose API records stopped coming; the spans given up are counted.
pub const SPANS_PER_THREAD: usize = 1 << 18;
/// Records parsed between two reads of the span rings within a buffer: an 8 MiB buffer holds up
/// to 150,000 records, whose parsing takes long enough for a thread launching at simulator
/// speed (millions per second) to go round its ring (`launch_hooks::RING` spans) meanwhile.
const RECORDS_PER_SPAN_READ: u32 = 4096;

#[derive(Clone, Copy, Default)]
struct SpanEntry {
    enter: u64,
    exit: u64,
    name: u32,
    source: u32,
}

#[derive(Clone, Copy)]
struct Link {
    /// The span's ENTER; with `tid` (0 for external correlation) it names the span: the same
    /// span seen twice is not ambiguous.
    enter: u64,
    tid: u32,
    name: u32,
    /// Its `JOIN_*` source (a u8: the link is 32 bytes with its key; 2^18 of them are 8 MiB).
    source: u8,
    /// The settle round it was made in (`State::wait_round`): once a settle wait gave up in a
    /// later round, it is given up (`give_up_waiting`); its kernel still joins if it comes.
    round: u32,
    ambiguous: bool,
    /// The launch is awaited: no kernel joined it yet (and it is not ambiguous).
    awaited: bool,
}

#[derive(Default, Clone, Copy)]
struct RangeEntry {
    domain: u32,
    name: u32,
    named: bool,
    /// (group, op) of a torch_npu `communication` range.
    comm: Option<(u32, u32)>,
    with_device: bool,
    host: (Option<u64>, Option<u64>),
    device: (Option<u64>, Option<u64>),
    host_done: bool,
    device_done: bool,
}

#[derive(Clone, Copy)]
struct MarkPair {
    name: u32,
    host_enter: u64,
    host_exit: u64,
    exit_id: u64,
}

/// Entries of the memo of rows by name pointers (`RowMemo`).
const ROW_MEMO: usize = 64;

/// A record's table row found by its name pointers (a kernel's name and type, an API record's
/// name and kind) in the current buffer: records of a name seen before in it skip interning
/// (two memo probes per record) and the table's lookup. Cleared with the names' memo at each
/// buffer, and when the tables are replaced (`new_window`).
#[derive(Clone, Copy)]
struct RowMemo {
    a: usize,
    b: usize,
    /// The name id of `a`, the row, and whether it is the table's "(other)" row.
    name: u32,
    row: u32,
    other: bool,
}

const NO_ROW: RowMemo = RowMemo { a: 0, b: 0, name: 0, row: 0, other: false };

/// A memo slot for a name pointer: the address mixed (a multiply between two xor-shifts), so
/// names laid out at any stride spread over the slots.
#[inline(always)]
fn ptr_slot(p: usize) -> usize {
    let mut x = p as u64;
    x ^= x >> 29;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 32;
    (x as usize) % ROW_MEMO
}

/// The drain's state.
pub struct State {
    pub names: Names,
    pub sizes: Sizes,
    pub kernels: Table,
    pub apis: Table,
    pub collectives: Table,
    pub memcpy: Table,
    pub ranges: Table,
    /// (domain, name, with-device) -> instantaneous marks.
    pub marks: HashMap<(u32, u32, u32), u64>,
    pub launches: Launches,
    /// The device event log (kernels and collectives, timed; bounded per window).
    pub events: Recorder,
    pub counters: ActivityCounts,
    kernel_rows: [RowMemo; ROW_MEMO],
    api_rows: [RowMemo; ROW_MEMO],
    /// The last span's name pointer and its id (spans of a thread mostly share one function).
    span_name: (usize, u32),
    /// Mark pairing for `mark_launches` on (tid -> open ENTER mark (id, name, ts)).
    pub pair_launch_marks: bool,
    /// Whether kernels and API records take part in the host-device join (KERNEL with spans or
    /// external correlation): without it they are only aggregated.
    pub join_active: bool,
    /// API kinds (bit = kind) whose records fill the apis table: the kinds the user asked for.
    /// The RUNTIME_API records asked for the join alone only join (a launch's host time is the
    /// launches table's `api`, from its span); all kinds unless the collector says otherwise.
    pub tabled_api_kinds: u64,
    /// The RUNTIME_API join is sampled (`join_sample` < 1): launches log spans only inside the
    /// drain's sample windows, so a kernel with no link is unsampled unless a window that could
    /// still link it is unsettled.
    pub join_sampled: bool,
    /// When the unsettled sample window opened (activity clock): open, or closed and not yet
    /// drained. A kernel cannot start before its launch's ENTER, so one with no link that started
    /// before this (or with no such window) will never be linked.
    unsettled_since: Option<u64>,
    // -- join ---------------------------------------------------------------------------
    cursors: Vec<u64>,
    /// Per thread id, its spans not yet passed by its API records, oldest first.
    spans: Vec<(u32, SpanQueue<SpanEntry>)>,
    span_threads: HashMap<u32, usize>,
    /// The entry of `spans` the last API record used (records come in runs of one thread).
    last_thread: usize,
    by_external: HashMap<u64, (SpanEntry, bool)>,
    by_external_order: VecDeque<u64>,
    links: ByCorrelation<Link>,
    /// Settle waits that gave up so far: links made before the last one are given up.
    wait_round: u32,
    pending_kernels: HashMap<u64, Vec<(u64, u64)>>,
    pending_order: VecDeque<u64>,
    pending_kernel_count: usize,
    /// Launches with a correlation id whose kernel has not come, waited for / given up on.
    awaiting: u64,
    awaiting_given_up: u64,
    retry_api: Vec<(u32, u64, u64, u64, u32)>,
    /// The span rings as last fetched (`hook::rings`, again only when more were made).
    rings: Vec<&'static hook::Ring>,
    /// When the rings were last read, and the busiest ring's spans per second since the read
    /// before (the drain polls sooner while it is high: `drain::next_poll`).
    spans_read_at: Option<std::time::Instant>,
    pub span_rate: f64,
    // -- markers --------------------------------------------------------------------------
    ranges_open: HashMap<u64, RangeEntry>,
    ranges_order: VecDeque<u64>,
    open_launch_mark: HashMap<u32, (u64, u32, u64)>,
    mark_pairs: HashMap<u64, MarkPair>,
    exit_to_enter: HashMap<u64, u64>,
    device_marks: HashMap<u64, u64>,
    device_marks_order: VecDeque<u64>,
    communication_domain: u32,
}

impl Default for State {
    fn default() -> State {
        let mut names = Names::default();
        let communication_domain = names.intern("communication");
        State {
            names,
            sizes: Sizes::default(),
            kernels: Table::new(KERNEL_KEYS),
            apis: Table::new(OTHER_KEYS),
            collectives: Table::new(OTHER_KEYS),
            memcpy: Table::new(OTHER_KEYS),
            ranges: Table::new(OTHER_KEYS),
            marks: HashMap::default(),
            launches: Launches::default(),
            events: Recorder::default(),
            counters: ActivityCounts::default(),
            kernel_rows: [NO_ROW; ROW_MEMO],
            api_rows: [NO_ROW; ROW_MEMO],
            span_name: (0, EMPTY),
            pair_launch_marks: false,
            join_active: false,
            tabled_api_kinds: u64::MAX,
            join_sampled: false,
            unsettled_since: None,
            cursors: Vec::new(),
            spans: Vec::new(),
            span_threads: HashMap::default(),
            last_thread: 0,
            by_external: HashMap::default(),
            by_external_order: VecDeque::new(),
            links: ByCorrelation::new(CORRELATION_CAP),
            wait_round: 0,
            pending_kernels: HashMap::default(),
            pending_order: VecDeque::new(),
            pending_kernel_count: 0,
            awaiting: 0,
            awaiting_given_up: 0,
            retry_api: Vec::new(),
            rings: Vec::new(),
            spans_read_at: None,
            span_rate: 0.0,
            ranges_open: HashMap::default(),
            ranges_order: VecDeque::new(),
            open_launch_mark: HashMap::default(),
            mark_pairs: HashMap::default(),
            exit_to_enter: HashMap::default(),
            device_marks: HashMap::default(),
            device_marks_order: VecDeque::new(),
            communication_domain,
        }
    }
}

#[inline]
fn dur(start: u64, end: u64, c: &mut ActivityCounts) -> Option<u64> {
    if end < start {
        c[D::Negative] += 1;
        None
    } else {
        Some(end - start)
    }
}

impl State {
    /// Start after every span logged so far (rings outlive sessions: an earlier session's
    /// launches are not this one's).
    pub fn skip_old_spans(&mut self) {
        self.cursors =
            hook::rings().iter().map(|r| r.head.load(std::sync::atomic::Ordering::Acquire)).collect();
    }

    /// Read the spans the callbacks logged since the last call (before a round of buffers, so
    /// the API records of finished launches find their span), then give the API records that
    /// found none last round their second chance.
    // Out of line: one call per buffer or read (and callgrind then counts the drain apart).
    #[inline(never)]
    pub fn ingest_spans(&mut self) {
        self.read_spans();
        // API records that found no span last round get one more chance.
        for (tid, start, end, corr, kind) in std::mem::take(&mut self.retry_api) {
            self.api_join(tid, start, end, corr, kind, false);
        }
    }

    /// The spans logged since the last read, into the per-thread queues (or the external ids).
    fn read_spans(&mut self) {
        if self.rings.len() < hook::ring_count() {
            self.rings = hook::rings();
        }
        if self.cursors.len() < self.rings.len() {
            self.cursors.resize(self.rings.len(), 0);
        }
        let rings = std::mem::take(&mut self.rings);
        let external = hook::hooks() & hook::EXTERNAL != 0;
        let mut busiest = 0;
        for (i, r) in rings.iter().enumerate() {
            let from = self.cursors[i];
            let mut cursor = from;
            let lost = hook::read_ring(r, i as u32, &mut cursor, |s| self.take_span(s, external));
            self.counters[D::SpansLost] += lost;
            self.cursors[i] = cursor;
            busiest = busiest.max(cursor.saturating_sub(from));
        }
        self.rings = rings;
        let now = std::time::Instant::now();
        if let Some(at) = self.spans_read_at.replace(now) {
            self.span_rate = busiest as f64 / now.duration_since(at).as_secs_f64().max(1e-6);
        }
    }

    /// One span read back: its launch's API time, and its place in its thread's queue (or
    /// under its external id).
    #[inline(always)]
    fn take_span(&mut self, s: Span, external: bool) {
        let name = if s.name == self.span_name.0 {
            self.span_name.1
        } else {
            // SAFETY: span names are the callback's functionName pointers: static strings
            // of the library, which is never unloaded.
            let id = unsafe { self.names.at(s.name) };
            self.span_name = (s.name, id);
            id
        };
        let source = if external { JOIN_EXTERNAL } else { JOIN_RUNTIME_API };
        let e = SpanEntry { enter: s.enter, exit: s.exit, name, source };
        if let Some(d) = dur(s.enter, s.exit, &mut self.counters) {
            self.launches.row(name, source).api.record(d);
        }
        if external {
            let id = hook::external_id(s.ring, s.seq);
            self.by_external.insert(id, (e, s.overlapped));
            self.by_external_order.push_back(id);
            if self.by_external_order.len() > CORRELATION_CAP {
                if let Some(old) = self.by_external_order.pop_front() {
                    self.by_external.remove(&old);
                }
            }
            return;
        }
        let t = self.thread_spans(s.tid, true).unwrap_or_default();
        let q = &mut self.spans[t].1;
        q.push_back(e);
        if q.len() > SPANS_PER_THREAD {
            q.pop_front();
            self.counters[D::SpansLost] += 1;
        }
    }

    /// Every record of one completed buffer.
    // Out of line: one call per buffer or read (and callgrind then counts the drain apart).
    #[inline(never)]
    pub fn ingest_buffer(&mut self, bytes: &[u8]) {
        self.counters[D::Buffers] += 1;
        self.names.new_buffer();
        self.forget_rows();
        let sizes = self.sizes;
        let mut it = Records::new(bytes, &sizes);
        let read_spans = self.join_active && hook::hooks() & (hook::SPANS | hook::EXTERNAL) != 0;
        let mut until_read = RECORDS_PER_SPAN_READ;
        for r in it.by_ref() {
            match r {
                Ok(rec) => {
                    self.counters[D::Records] += 1;
                    self.ingest(rec);
                    until_read -= 1;
                    if until_read == 0 {
                        until_read = RECORDS_PER_SPAN_READ;
                        if read_spans {
                            self.read_spans();
                        }
                    }
                }
                Err(Bad::UnknownKind(_)) | Err(Bad::Truncated) => {
                    self.counters[D::BadRecords] += 1;
                }
            }
        }
        self.counters[D::SkippedBytes] += it.skipped() as u64;
    }

    /// Forget the rows found by pointer (a new buffer, or new tables).
    fn forget_rows(&mut self) {
        self.kernel_rows = [NO_ROW; ROW_MEMO];
        self.api_rows = [NO_ROW; ROW_MEMO];
        self.span_name = (0, EMPTY);
    }

    /// A new window: empty tables, marks and launch rows (the join's state, the names and the
    /// event log's sequence numbers carry on).
    pub fn new_window(&mut self) {
        self.kernels = Table::new(KERNEL_KEYS);
        self.apis = Table::new(OTHER_KEYS);
        self.collectives = Table::new(OTHER_KEYS);
        self.memcpy = Table::new(OTHER_KEYS);
        self.ranges = Table::new(OTHER_KEYS);
        self.marks.clear();
        self.launches = Launches::default();
        self.forget_rows();
    }

    /// The kernels row of a KERNEL record's name and type pointers, whether it is the "(other)"
    /// row, and the name's id.
    #[inline]
    fn kernel_row(&mut self, name: usize, ty: usize) -> (u32, usize, bool) {
        let slot = ptr_slot(name);
        let m = self.kernel_rows[slot];
        if m.a == name && m.b == ty && name != 0 {
            return (m.name, m.row as usize, m.other);
        }
        // SAFETY: KERNEL name and type are filled by the library (reference §1.4).
        let (n, t) = unsafe { (self.names.at(name), self.names.at(ty)) };
        let (row, other) = self.kernels.row_index((n, t, 0));
        self.kernel_rows[slot] = RowMemo { a: name, b: ty, name: n, row: row as u32, other };
        (n, row, other)
    }

    /// The apis row of an API record's kind and name pointer, and whether it is "(other)".
    #[inline]
    fn api_row(&mut self, kind: u32, name: usize) -> (usize, bool) {
        let slot = ptr_slot(name);
        let m = self.api_rows[slot];
        if m.a == name && m.b == kind as usize && name != 0 {
            return (m.row as usize, m.other);
        }
        // SAFETY: the API record's name is filled (reference §1.4).
        let n = unsafe { self.names.at(name) };
        let (row, other) = self.apis.row_index((kind, n, 0));
        self.api_rows[slot] = RowMemo { a: name, b: kind as usize, name: n, row: row as u32, other };
        (row, other)
    }

    fn ingest(&mut self, rec: Record) {
        let c = &mut self.counters;
        match rec {
            Record::Kernel { start, end, device, stream, correlation, kind_name, name } => {
                let Some(d) = dur(start, end, c) else { return };
                let (n, row, other) = self.kernel_row(name, kind_name);
                self.kernels.row_at(row, other).hist.record(d);
                self.events.log_with(|| Event {
                    kind: EVENT_KERNEL,
                    name: n,
                    group: None,
                    device,
                    stream,
                    correlation,
                    sequence: None,
                    start,
                    end,
                    bytes: None,
                    data_type: None,
                });
                if self.join_active {
                    self.kernel_join(correlation, start, end);
                }
            }
            Record::Api { kind, start, end, tid, correlation, name, .. } => {
                if self.tabled_api_kinds >> (kind & 63) & 1 != 0 {
                    let Some(d) = dur(start, end, c) else { return };
                    let (row, other) = self.api_row(kind, name);
                    self.apis.row_at(row, other).hist.record(d);
                } else if end < start {
                    // A record no table takes still says its clock ran backwards, and joins nothing.
                    c[D::Negative] += 1;
                    return;
                }
                if self.join_active && (kind == abi::KIND_RUNTIME_API || kind == abi::KIND_ACL_API) {
                    self.api_join(tid, start, end, correlation, kind, true);
                }
            }
            Record::Hccl { start, end, device, stream, bandwidth, name, comm } => {
                let Some(d) = dur(start, end, c) else { return };
                // SAFETY: HCCL name and commName are filled (reference §1.4).
                let (n, g) = unsafe { (self.names.at(name), self.names.at(comm)) };
                let good = bandwidth.is_finite() && bandwidth > 0.0;
                let bw = good.then_some((bandwidth * 1000.0) as u64);
                self.collectives.record2((g, n, COLL_HCCL), d, bw, 0);
                // The record has no byte count: bandwidth (bytes/ns) times duration gives it back.
                let bytes = good.then(|| (bandwidth * d as f64).round() as u64);
                self.events.log(Event {
                    kind: EVENT_HCCL,
                    name: n,
                    group: Some(g),
                    device,
                    stream,
                    correlation: 0,
                    sequence: None,
                    start,
                    end,
                    bytes,
                    data_type: None,
                });
            }
            Record::Communication {
                data_type,
                count,
                device,
                stream,
                start,
                end,
                name,
                comm,
                correlation,
            } => {
                let Some(d) = dur(start, end, c) else { return };
                // SAFETY: COMMUNICATION name and commName are filled (reference §1.4).
                let (n, g) = unsafe { (self.names.at(name), self.names.at(comm)) };
                let bytes = count.saturating_mul(abi::data_type_bytes(data_type));
                // bytes/ns = GB/s; kept as MB/s integers.
                let bw = (bytes > 0 && d > 0).then(|| (bytes as u128 * 1000 / d as u128) as u64);
                self.collectives.record2((g, n, COLL_COMMUNICATION), d, bw, bytes);
                self.events.log(Event {
                    kind: EVENT_COMMUNICATION,
                    name: n,
                    group: Some(g),
                    device,
                    stream,
                    correlation,
                    sequence: None,
                    start,
                    end,
                    bytes: Some(bytes),
                    data_type: Some(data_type),
                });
            }
            Record::Memcpy { copy_kind, bytes, start, end, .. } => {
                let Some(d) = dur(start, end, c) else { return };
                self.memcpy.record2((abi::KIND_MEMCPY, copy_kind.min(99), 0), d, Some(bytes), bytes);
            }
            Record::Memset { bytes, start, end, .. } => {
                let Some(d) = dur(start, end, c) else { return };
                self.memcpy.record2((abi::KIND_MEMSET, 0, 0), d, Some(bytes), bytes);
            }
            Record::Memory { op, memory_kind, start, end, bytes, .. } => {
                let Some(d) = dur(start, end, c) else { return };
                let sub = op.min(9) * 16 + memory_kind.min(15);
                self.memcpy.record2((abi::KIND_MEMORY, sub, 0), d, Some(bytes), bytes);
            }
            Record::ExternalCorrelation { external_kind, external_id, correlation } => {
                if external_kind != abi::EXTERNAL_CUSTOM2 {
                    return;
                }
                if let Some(&(span, overlapped)) = self.by_external.get(&external_id) {
                    if overlapped {
                        self.counters[D::Overlapped] += 1;
                    } else {
                        self.link(correlation, span, 0);
                    }
                }
            }
            Record::Other(_) => {}
            Record::Marker { flag, source, timestamp, id, obj, name, domain } => {
                self.marker(flag, source, timestamp, id, obj, name, domain);
            }
        }
    }

    // -- host <-> device join ----------------------------------------------------------------

    /// The index in `spans` of thread `tid`'s queue; with `make`, made if the thread has none.
    #[inline]
    fn thread_spans(&mut self, tid: u32, make: bool) -> Option<usize> {
        if self.spans.get(self.last_thread).is_some_and(|(t, _)| *t == tid) {
            return Some(self.last_thread);
        }
        let i = match self.span_threads.get(&tid) {
            Some(&i) => i,
            None if make => {
                self.spans.push((tid, SpanQueue::default()));
                self.span_threads.insert(tid, self.spans.len() - 1);
                self.spans.len() - 1
            }
            None => return None,
        };
        self.last_thread = i;
        Some(i)
    }

    fn api_join(&mut self, tid: u32, start: u64, end: u64, corr: u64, kind: u32, first: bool) {
        let Some(t) = self.thread_spans(tid, false) else {
            if first {
                self.retry_api.push((tid, start, end, corr, kind));
            }
            return;
        };
        let q = &mut self.spans[t].1;
        // Records of a thread arrive in time order: spans that ended before this one began
        // cannot contain it or a later record.
        while q.front().is_some_and(|s| s.exit < start) {
            q.pop_front();
        }
        // Launch spans of one thread do not overlap (so they end in the order they began), but
        // may touch (on a virtual clock a launch can begin when the last one ends): the candidate
        // is the last of the first few left that began at or before the record.
        let mut i = 0;
        while q.get(i + 1).is_some_and(|s| s.enter <= start) {
            i += 1;
        }
        let hit = q.get(i).copied().filter(|s| s.enter <= start && end <= s.exit);
        // A span read that began after the record did: spans are read in order, so the record's
        // launch, if it has one, is among those read. Otherwise its span may not be read yet
        // (a span that ended when the record began is no proof: on a virtual clock the next
        // launch begins at that instant).
        let later_span = q.back().is_some_and(|s| s.enter > start);
        match hit {
            Some(s) => {
                if corr == 0 {
                    self.counters[D::ZeroCorrelation] += 1;
                } else {
                    self.link(corr, s, tid);
                }
            }
            None if first && !later_span => {
                // Its launch may not have exited (been logged) yet.
                self.retry_api.push((tid, start, end, corr, kind));
            }
            None => {} // not a launch's record (the runtime reports every API)
        }
    }

    fn link(&mut self, corr: u64, s: SpanEntry, tid: u32) {
        let new = Link {
            enter: s.enter,
            tid,
            name: s.name,
            source: s.source as u8,
            round: self.wait_round,
            ambiguous: false,
            awaited: true,
        };
        let slot = self.links.slot_mut(corr);
        match slot {
            Some((k, l)) if *k == corr => {
                if (l.tid, l.enter) != (tid, s.enter) && !l.ambiguous {
                    l.ambiguous = true;
                    // Its kernels will not join either launch: neither is awaited any more.
                    let was = *l;
                    l.awaited = false;
                    self.counters[D::Ambiguous] += 1;
                    self.stop_awaiting(was);
                }
            }
            _ => {
                // A link of the id `CORRELATION_CAP` before this one leaves for it.
                let old = slot.replace((corr, new)).map(|(_, l)| l);
                self.awaiting += 1;
                if let Some(old) = old.filter(|l| l.awaited) {
                    self.stop_awaiting(old);
                    self.counters[D::UnjoinedLaunches] += 1;
                }
            }
        }
        if self.pending_kernel_count == 0 {
            return;
        }
        if let Some(ks) = self.pending_kernels.remove(&corr) {
            self.pending_kernel_count -= ks.len();
            for (a, b) in ks {
                self.kernel_join(corr, a, b);
            }
        }
    }

    /// A link leaves the awaited count it is in.
    fn stop_awaiting(&mut self, l: Link) {
        if !l.awaited {
            return;
        }
        if l.round != self.wait_round {
            self.awaiting_given_up -= 1;
        } else {
            self.awaiting -= 1;
        }
    }

    /// Launches whose kernel has not come and that no settle wait has given up on yet.
    pub fn awaited_launches(&self) -> u64 {
        self.awaiting
    }

    /// A settle wait ran out: stop waiting for the launches it waited for (each costs one wait
    /// at most); they stay counted as pending, and join if their kernels come.
    pub fn give_up_waiting(&mut self) {
        if self.awaiting == 0 {
            return;
        }
        // Every link of earlier rounds is given up already or not awaited: a new round gives up
        // the current one's at once. (A link that outlived 2^32 give-ups would count as current.)
        self.wait_round = self.wait_round.wrapping_add(1);
        self.awaiting_given_up += self.awaiting;
        self.awaiting = 0;
    }

    fn kernel_join(&mut self, corr: u64, start: u64, end: u64) {
        if corr == 0 {
            self.counters[D::UnjoinedKernels] += 1;
            return;
        }
        let round = self.wait_round;
        let Some(l) = self.links.get_mut(corr) else {
            if self.join_sampled && self.unsettled_since.is_none_or(|t| start < t) {
                self.counters[D::KernelsUnsampled] += 1;
            } else {
                self.kernel_waits(corr, start, end);
            }
            return;
        };
        if l.ambiguous {
            self.counters[D::UnjoinedKernels] += 1;
            return;
        }
        let l0 = *l;
        l.awaited = false;
        if l0.awaited {
            if l0.round != round {
                self.counters[D::LateKernels] += 1;
            }
            self.stop_awaiting(l0);
        }
        if start < l0.enter {
            self.counters[D::ClockSkew] += 1;
            return;
        }
        let r = self.launches.row(l0.name, u32::from(l0.source));
        r.queue.record(start - l0.enter);
        r.kernel.record(end.saturating_sub(start));
    }

    /// A kernel whose launch has not been linked yet waits for it (bounded).
    fn kernel_waits(&mut self, corr: u64, start: u64, end: u64) {
        let v = self.pending_kernels.entry(corr).or_default();
        if v.is_empty() {
            self.pending_order.push_back(corr);
        }
        v.push((start, end));
        self.pending_kernel_count += 1;
        while self.pending_kernel_count > PENDING_CAP {
            let Some(old) = self.pending_order.pop_front() else { break };
            if let Some(ks) = self.pending_kernels.remove(&old) {
                self.pending_kernel_count -= ks.len();
                self.counters[D::UnjoinedKernels] += ks.len() as u64;
            }
        }
    }

    /// A sample window opened at `at` (activity clock): kernels with no link that start from
    /// then on may belong to its launches, and wait for them until it settles.
    pub fn open_sample_window(&mut self, at: u64) {
        self.unsettled_since = Some(at);
    }

    /// The sample window is settled (closed, and every record it handed over ingested): the
    /// kernels still waiting for a launch will not get one; they are unsampled.
    pub fn settle_sample_window(&mut self) {
        self.unsettled_since = None;
        self.counters[D::KernelsUnsampled] += self.pending_kernel_count as u64;
        self.pending_kernels.clear();
        self.pending_order.clear();
        self.pending_kernel_count = 0;
    }

    /// Kernels still waiting for their launch.
    pub fn pending_kernels(&self) -> u64 {
        self.pending_kernel_count as u64
    }

    /// At close: whatever waits for a partner will not get one; count it.
    pub fn give_up_pending(&mut self) {
        self.counters[D::UnjoinedKernels] += self.pending_kernel_count as u64;
        self.counters[D::UnjoinedLaunches] += self.awaiting + self.awaiting_given_up;
        for l in self.links.values_mut() {
            l.awaited = false;
        }
        self.awaiting = 0;
        self.awaiting_given_up = 0;
        self.pending_kernels.clear();
        self.pending_order.clear();
        self.pending_kernel_count = 0;
        let open =
            self.ranges_open.values().filter(|r| !r.host_done || (r.with_device && !r.device_done)).count();
        self.counters[D::UnpairedMarkers] += (open + self.mark_pairs.len()) as u64;
        self.ranges_open.clear();
        self.ranges_order.clear();
        self.mark_pairs.clear();
        self.exit_to_enter.clear();
    }

    // -- MSTX ------------------------------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    fn marker(
        &mut self,
        flag: u32,
        source: u32,
        ts: u64,
        id: u64,
        obj: (u32, u32),
        name: usize,
        domain: usize,
    ) {
        use abi::*;
        let host = source == SOURCE_HOST;
        match flag {
            FLAG_INSTANTANEOUS | FLAG_INSTANTANEOUS_WITH_DEVICE => {
                let dev = u32::from(flag == FLAG_INSTANTANEOUS_WITH_DEVICE);
                if host {
                    // SAFETY: host marks carry the cached message and domain (reference §2.2).
                    let (n, d) = unsafe { (self.names.at(name), self.names.at(domain)) };
                    *self.marks.entry((d, n, dev)).or_default() += 1;
                    if dev == 1 && self.pair_launch_marks {
                        self.launch_mark(obj.1, id, n, ts);
                    }
                } else if self.pair_launch_marks {
                    // Device marks have no name: they pair by id.
                    self.device_mark(id, ts);
                }
            }
            FLAG_START | FLAG_START_WITH_DEVICE | FLAG_END | FLAG_END_WITH_DEVICE => {
                let start = flag == FLAG_START || flag == FLAG_START_WITH_DEVICE;
                let with_device = flag == FLAG_START_WITH_DEVICE || flag == FLAG_END_WITH_DEVICE;
                let is_new = !self.ranges_open.contains_key(&id);
                let mut e = self.ranges_open.remove(&id).unwrap_or_default();
                e.with_device |= with_device;
                if host && start {
                    // SAFETY: a host START carries the message and domain (END records do not).
                    let (n, d) = unsafe { (self.names.at(name), self.names.at(domain)) };
                    e.name = n;
                    e.domain = d;
                    e.named = true;
                    if d == self.communication_domain {
                        e.comm = self.parse_communication(n);
                    }
                }
                let slot = match (host, start) {
                    (true, true) => &mut e.host.0,
                    (true, false) => &mut e.host.1,
                    (false, true) => &mut e.device.0,
                    (false, false) => &mut e.device.1,
                };
                *slot = Some(ts);
                self.finish_range(&mut e);
                if e.host_done && (!e.with_device || e.device_done) {
                    return;
                }
                self.ranges_open.insert(id, e);
                if is_new {
                    self.ranges_order.push_back(id);
                }
                while self.ranges_order.len() > PENDING_CAP {
                    if let Some(old) = self.ranges_order.pop_front() {
                        if self.ranges_open.remove(&old).is_some() {
                            self.counters[D::UnpairedMarkers] += 1;
                        }
                    }
                }
            }
            _ => self.counters[D::BadRecords] += 1,
        }
    }

    fn parse_communication(&mut self, name: u32) -> Option<(u32, u32)> {
        let text = self.names.get(name).to_owned();
        let op = json_string(&text, "opName")?.into_owned();
        let group = json_string(&text, "groupName").map_or_else(String::new, |g| g.into_owned());
        Some((self.names.intern(&group), self.names.intern(&op)))
    }

    fn finish_range(&mut self, e: &mut RangeEntry) {
        if !e.named {
            return;
        }
        if !e.host_done {
            if let (Some(a), Some(b)) = e.host {
                e.host_done = true;
                if let Some(d) = dur(a, b, &mut self.counters) {
                    self.ranges.record((e.domain, e.name, RANGE_HOST), d);
                    if let Some((g, op)) = e.comm {
                        self.collectives.record2((g, op, COLL_MSTX_HOST), d, None, 0);
                    }
                }
            }
        }
        if !e.device_done {
            if let (Some(a), Some(b)) = e.device {
                e.device_done = true;
                if let Some(d) = dur(a, b, &mut self.counters) {
                    self.ranges.record((e.domain, e.name, RANGE_DEVICE), d);
                    if let Some((g, op)) = e.comm {
                        self.collectives.record2((g, op, COLL_MSTX_DEVICE), d, None, 0);
                    }
                }
            }
        }
    }

    /// A host mark with device made by `mark_launches`: the first on a thread is the ENTER,
    /// the next with the same name the EXIT.
    fn launch_mark(&mut self, tid: u32, id: u64, name: u32, ts: u64) {
        match self.open_launch_mark.remove(&tid) {
            Some((enter_id, n, enter_ts)) if n == name => {
                self.mark_pairs
                    .insert(enter_id, MarkPair { name, host_enter: enter_ts, host_exit: ts, exit_id: id });
                self.exit_to_enter.insert(id, enter_id);
                self.try_pair(enter_id);
                while self.mark_pairs.len() > PENDING_CAP {
                    let Some(&k) = self.mark_pairs.keys().next() else { break };
                    if let Some(p) = self.mark_pairs.remove(&k) {
                        self.exit_to_enter.remove(&p.exit_id);
                    }
                    self.counters[D::UnpairedMarkers] += 1;
                }
            }
            Some(_) => {
                self.counters[D::UnpairedMarkers] += 1;
                self.open_launch_mark.insert(tid, (id, name, ts));
            }
            None => {
                self.open_launch_mark.insert(tid, (id, name, ts));
            }
        }
    }

    fn device_mark(&mut self, id: u64, ts: u64) {
        self.device_marks.insert(id, ts);
        self.device_marks_order.push_back(id);
        while self.device_marks_order.len() > PENDING_CAP {
            if let Some(old) = self.device_marks_order.pop_front() {
                if self.device_marks.remove(&old).is_some() {
                    self.counters[D::UnpairedMarkers] += 1;
                }
            }
        }
        let enter = self.exit_to_enter.get(&id).copied().unwrap_or(id);
        self.try_pair(enter);
    }

    fn try_pair(&mut self, enter_id: u64) {
        let Some(p) = self.mark_pairs.get(&enter_id).copied() else { return };
        let (Some(&d0), Some(&d1)) = (self.device_marks.get(&enter_id), self.device_marks.get(&p.exit_id))
        else {
            return;
        };
        self.mark_pairs.remove(&enter_id);
        self.exit_to_enter.remove(&p.exit_id);
        self.device_marks.remove(&enter_id);
        self.device_marks.remove(&p.exit_id);
        let r = self.launches.row(p.name, JOIN_MARKS);
        r.api.record(p.host_exit.saturating_sub(p.host_enter));
        if d0 >= p.host_enter {
            r.queue.record(d0 - p.host_enter);
        } else {
            self.counters[D::ClockSkew] += 1;
        }
        r.kernel.record(d1.saturating_sub(d0));
    }

    /// The name of an id, for output.
    pub fn name(&self, id: u32) -> &str {
        if id == EMPTY {
            ""
        } else {
            self.names.get(id)
        }
    }

    /// Counters with the tables' and names' own.
    pub fn all_counters(&self) -> ActivityCounts {
        let mut c = self.counters;
        c[D::IntoOther] = [&self.kernels, &self.apis, &self.collectives, &self.memcpy, &self.ranges]
            .iter()
            .map(|t| t.into_other)
            .sum();
        c[D::NamesOverflow] = self.names.overflow;
        c[D::BadPointers] = self.names.bad_pointers;
        c[D::KernelsPending] = self.pending_kernel_count as u64;
        c[D::LaunchesPending] = self.awaiting + self.awaiting_given_up;
        c
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::CString;

    use mspti_abi::activity::{MsptiActivityApi, MsptiActivityKernel, MsptiIdPair};

    use super::*;

    fn bytes<T>(v: &T) -> Vec<u8> {
        // SAFETY: the record structs are packed plain data; viewing them as bytes is sound.
        unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }.to_vec()
    }

    fn api(name: &CString, tid: u32, corr: u64, start: u64) -> MsptiActivityApi {
        MsptiActivityApi {
            kind: abi::KIND_RUNTIME_API,
            start,
            end: start + 900,
            pt: MsptiIdPair::pt(1, tid),
            correlation_id: corr,
            name: name.as_ptr(),
            _pad: [0; 4],
        }
    }

    fn kernel(name: &CString, corr: u64, start: u64) -> MsptiActivityKernel {
        MsptiActivityKernel {
            kind: abi::KIND_KERNEL,
            start,
            end: start + 500,
            ds: MsptiIdPair::ds(0, 3),
            correlation_id: corr,
            type_: name.as_ptr(),
            name: name.as_ptr(),
            _pad: [0; 4],
        }
    }

    /// Kernels joined (the launches table), and the counters every other kernel ends in.
    fn kernel_fates(st: &mut State, launch: &str) -> (u64, u64, u64, u64) {
        let row = st.launches.row(st.names.intern(launch), JOIN_RUNTIME_API).kernel.count();
        let c = st.all_counters();
        (row, c[D::KernelsUnsampled], c[D::UnjoinedKernels], c[D::KernelsPending])
    }

    #[test]
    fn a_sampled_join_counts_kernels_outside_a_window_as_unsampled_without_waiting() {
        let kname = CString::new("MatMul").unwrap();
        let mut st = State { join_active: true, join_sampled: true, ..State::default() };
        st.skip_old_spans();
        // No window unsettled: a kernel with no link never enters the pending map.
        let mut buf = Vec::new();
        for i in 0..100 {
            buf.extend(bytes(&kernel(&kname, 1 + i, 10_000 + i * 1000)));
        }
        st.ingest_buffer(&buf);
        assert_eq!(st.pending_kernels(), 0);
        assert!(st.pending_kernels.is_empty() && st.pending_order.is_empty());
        assert_eq!(st.all_counters()[D::KernelsUnsampled], 100);
        // A window opened at 500,000: a kernel that started before it cannot be its launches'
        // (unsampled at once); one that started after waits until the window settles.
        st.open_sample_window(500_000);
        let mut buf = bytes(&kernel(&kname, 200, 499_999));
        buf.extend(bytes(&kernel(&kname, 201, 500_000)));
        st.ingest_buffer(&buf);
        assert_eq!((st.pending_kernels(), st.all_counters()[D::KernelsUnsampled]), (1, 101));
        st.settle_sample_window();
        assert_eq!((st.pending_kernels(), st.all_counters()[D::KernelsUnsampled]), (0, 102));
        assert_eq!(st.all_counters()[D::UnjoinedKernels], 0);
    }

    #[test]
    fn every_kernel_of_a_sampled_join_is_joined_unsampled_unjoined_or_pending() {
        // A name of its own: tests run at once, and every State reads every thread's ring.
        let name = CString::new("aclrtLaunchKernelWithConfig").unwrap();
        let kname = CString::new("MatMul").unwrap();
        let tid = hook::os_tid();
        let n = name.as_ptr() as usize;
        let mut st = State { join_active: true, join_sampled: true, ..State::default() };
        st.skip_old_spans();
        let mut kernels = 0;
        // Before the window: launches 1..=10 (no spans, no API records): unsampled.
        let mut buf = Vec::new();
        for c in 1..=10u64 {
            buf.extend(bytes(&kernel(&kname, c, c * 10_000 + 2000)));
            kernels += 1;
        }
        st.ingest_buffer(&buf);
        // The window: launches 11..=20 logged with their API records; 21 logged, its kernel
        // comes before its API record; 22's kernel has correlation 0 (unjoined); 23's kernel
        // comes but neither its span nor its API record (its launch straddled the close).
        let t0 = 200_000;
        st.open_sample_window(t0);
        let mut buf = Vec::new();
        for c in 11..=21u64 {
            let enter = t0 + c * 10_000;
            assert!(hook::log_span(n, hook::LAUNCH_FIRST, enter, enter + 1000));
        }
        st.ingest_spans();
        for c in 11..=20u64 {
            let enter = t0 + c * 10_000;
            buf.extend(bytes(&kernel(&kname, c, enter + 3000)));
            buf.extend(bytes(&api(&name, tid, c, enter + 50)));
        }
        buf.extend(bytes(&kernel(&kname, 21, t0 + 21 * 10_000 + 3000)));
        buf.extend(bytes(&kernel(&kname, 0, t0 + 22 * 10_000 + 3000)));
        buf.extend(bytes(&kernel(&kname, 23, t0 + 23 * 10_000 + 3000)));
        kernels += 13;
        st.ingest_buffer(&buf);
        let launch = "aclrtLaunchKernelWithConfig";
        assert_eq!(kernel_fates(&mut st, launch), (10, 10, 1, 2));
        st.ingest_buffer(&bytes(&api(&name, tid, 21, t0 + 21 * 10_000 + 50)));
        assert_eq!(kernel_fates(&mut st, launch), (11, 10, 1, 1));
        st.settle_sample_window();
        let (joined, unsampled, unjoined, pending) = kernel_fates(&mut st, launch);
        assert_eq!((joined, unsampled, unjoined, pending), (11, 11, 1, 0));
        assert_eq!(joined + unsampled + unjoined + pending, kernels);
    }

    #[test]
    fn an_api_record_that_begins_as_the_last_span_read_ends_waits_for_its_own_span() {
        // On a virtual clock launch 2 begins the instant launch 1 ends. Its RUNTIME_API record
        // comes before its span is read: it must wait for it, not be taken for a record that is
        // no launch's (its kernel would never join).
        let name = CString::new("aclrtLaunchKernel").unwrap();
        let kname = CString::new("MatMul").unwrap();
        let tid = hook::os_tid();
        let (n, k) = (name.as_ptr() as usize, kname.as_ptr());
        let mut st = State { join_active: true, ..State::default() };
        st.skip_old_spans();
        assert!(hook::log_span(n, hook::LAUNCH_FIRST, 1000, 2000));
        st.ingest_spans();
        let api_at = |corr: u64, start: u64| api(&name, tid, corr, start);
        let kernel = |corr: u64, start: u64| MsptiActivityKernel {
            kind: abi::KIND_KERNEL,
            start,
            end: start + 500,
            ds: MsptiIdPair::ds(0, 3),
            correlation_id: corr,
            type_: k,
            name: k,
            _pad: [0; 4],
        };
        let mut buf = bytes(&api_at(1, 1000));
        buf.extend(bytes(&api_at(2, 2000)));
        buf.extend(bytes(&kernel(1, 5000)));
        buf.extend(bytes(&kernel(2, 6000)));
        st.ingest_buffer(&buf);
        assert_eq!(st.pending_kernels(), 1, "launch 2's kernel waits for its launch");
        assert!(hook::log_span(n, hook::LAUNCH_FIRST, 2000, 3000));
        st.ingest_spans();
        assert_eq!(st.pending_kernels(), 0);
        let row = st.launches.row(st.names.intern("aclrtLaunchKernel"), JOIN_RUNTIME_API).clone();
        assert_eq!((row.api.count(), row.kernel.count()), (2, 2));
        // Queue delays: ENTER to kernel start.
        assert_eq!((row.queue.min_value(), row.queue.max_value()), (4000, 4000));
    }
}
