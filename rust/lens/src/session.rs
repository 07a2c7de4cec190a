//! The subscription's life: subscribe, choose what is enabled, start and stop recording, reset
//! windows, snapshot, unsubscribe. One active session per process, as MSPTI allows one
//! subscriber.
//!
//! ```text
//!   new() ──subscribe──▶ Stopped ──start()──▶ Running ──stop()──▶ Stopped ──close()──▶ Closed
//!                          │  enable()/disable() change the wanted set; while Running they
//!                          │  reach MSPTI at once
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::activity::Collector;

use mspti_abi::*;

use crate::core::clock::{self, ClockKind};
use crate::core::locks::lock;
use crate::core::{arrivals, sections, windows};
use crate::error::{Error, Result};
use crate::ffi::MsptiLibrary;

static ACTIVE: AtomicBool = AtomicBool::new(false);

/// How long a stop waits for a callback still writing (one descheduled by the OS; a running one
/// is out within microseconds) before it counts it as unsettled and goes on.
const SETTLE_BOUND: std::time::Duration = std::time::Duration::from_millis(100);

pub struct Session {
    lib: Arc<MsptiLibrary>,
    handle: MsptiSubscriberHandle,
    /// Wanted enable bits per domain (index = domain value), applied while running.
    wanted: [u64; 3],
    running: bool,
    closed: bool,
    clock: ClockKind,
    /// Whether runs keep the slowest calls (on unless the user turns them off).
    slowest: bool,
    /// The activity collector sharing this subscription: started, flushed and
    /// closed with the session, before the subscription goes.
    activity: Option<Arc<Mutex<Collector>>>,
}

// SAFETY: the handle is an opaque token MSPTI accepts from any thread; all mutation goes through
// &mut self, which the binding layer guards with a mutex.
unsafe impl Send for Session {}

/// The callback domains a session traces, by the name users give them, with their MSPTI value:
/// the one list (the Python catalogue reads it through the binding).
pub const DOMAINS: [(&str, MsptiCallbackDomain); 2] =
    [("runtime", MSPTI_CB_DOMAIN_RUNTIME), ("hccl", MSPTI_CB_DOMAIN_HCCL)];

fn check_domain(domain: u32) -> Result<()> {
    if DOMAINS.iter().any(|&(_, d)| d == domain) {
        Ok(())
    } else {
        let valid: Vec<String> = DOMAINS.iter().map(|(name, d)| format!("{d} ({name})")).collect();
        Err(Error::InvalidArgument(format!(
            "unknown callback domain {domain}; valid domains are {}",
            valid.join(" and ")
        )))
    }
}

fn domain_bits(domain: u32) -> u64 {
    let max = domain_max_cbid(domain).unwrap_or(0);
    ((1u64 << (max + 1)) - 1) & !1
}

impl Session {
    /// Subscribe to `lib`. Fails if another Session is active, or if MSPTI's only subscriber slot
    /// is taken (MSPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED).
    ///
    /// # Errors
    /// `AlreadyActive`, `Forked`, or the library's error from `msptiSubscribe`.
    pub fn new(lib: Arc<MsptiLibrary>) -> Result<Session> {
        Session::with_userdata(lib, 0)
    }

    /// As `new`, with `userdata` as the subscription data MSPTI passes to every callback (the
    /// stream of `mark_launches`, as the guide's scenario 2 passes it).
    ///
    /// # Errors
    /// As `new`.
    pub fn with_userdata(lib: Arc<MsptiLibrary>, userdata: usize) -> Result<Session> {
        if windows::FORKED.load(Ordering::Relaxed) {
            return Err(Error::Forked);
        }
        if ACTIVE.swap(true, Ordering::AcqRel) {
            return Err(Error::AlreadyActive);
        }
        windows::install_fork_handler();
        crate::core::shard::prepare();
        crate::core::seqlock::prepare_fences();
        let mut handle: MsptiSubscriberHandle = std::ptr::null_mut();
        let ud = userdata as *mut std::ffi::c_void;
        // SAFETY: msptiSubscribe with a valid out pointer and our callback, which is safe to call
        // from any thread at any time, also after unsubscribe (it only touches static state).
        let rc = unsafe { (lib.subscribe)(&mut handle, Some(crate::callback::subscriber()), ud) };
        if let Err(e) = lib.check("msptiSubscribe", rc) {
            ACTIVE.store(false, Ordering::Release);
            return Err(e);
        }
        // A new session starts with an empty window.
        windows::end_run();
        windows::reset();
        Ok(Session {
            lib,
            handle,
            wanted: [0; 3],
            running: false,
            closed: false,
            clock: ClockKind::Tsc,
            slowest: true,
            activity: None,
        })
    }

    /// Keep the slowest calls per (thread, key) and window, or not, from the next start on.
    pub fn set_slowest(&mut self, on: bool) {
        self.slowest = on;
    }

    pub fn library(&self) -> &Arc<MsptiLibrary> {
        &self.lib
    }
    pub fn is_running(&self) -> bool {
        self.running
    }
    pub fn is_closed(&self) -> bool {
        self.closed
    }
    pub fn clock(&self) -> ClockKind {
        self.clock
    }
    pub fn wanted(&self, domain: u32) -> u64 {
        self.wanted.get(domain as usize).copied().unwrap_or(0)
    }

    /// Whether this session's data may be read: open, and in the process that subscribed (a
    /// forked child has a copy it must not treat as its own).
    ///
    /// # Errors
    /// `Closed` or `Forked`.
    pub fn check_readable(&self) -> Result<()> {
        self.live()
    }

    fn live(&self) -> Result<()> {
        if self.closed {
            Err(Error::Closed)
        } else if windows::FORKED.load(Ordering::Relaxed) {
            Err(Error::Forked)
        } else {
            Ok(())
        }
    }

    fn call_enable_domain(&self, on: bool, domain: u32) -> Result<()> {
        // SAFETY: our live subscriber handle and a checked domain.
        let rc = unsafe { (self.lib.enable_domain)(u32::from(on), self.handle, domain) };
        self.lib.check("msptiEnableDomain", rc)
    }

    fn call_enable_callback(&self, on: bool, domain: u32, cbid: u32) -> Result<()> {
        // SAFETY: our live subscriber handle, a checked domain and id.
        let rc = unsafe { (self.lib.enable_callback)(u32::from(on), self.handle, domain, cbid) };
        self.lib.check("msptiEnableCallback", rc)
    }

    /// Enable or disable a whole domain.
    ///
    /// # Errors
    /// An invalid domain, a closed session, or the library's error (applied at once if running).
    pub fn set_domain(&mut self, domain: u32, on: bool) -> Result<()> {
        self.live()?;
        check_domain(domain)?;
        if self.running {
            // Before MSPTI sees the toggle: a call open across it is discarded.
            windows::toggled(domain, None);
            self.call_enable_domain(on, domain)?;
        }
        let bits = domain_bits(domain);
        let w = &mut self.wanted[domain as usize];
        *w = if on { *w | bits } else { *w & !bits };
        self.tell_activity()
    }

    /// Enable or disable one callback id.
    ///
    /// # Errors
    /// An invalid domain or id, a closed session, or the library's error.
    pub fn set_callback(&mut self, domain: u32, cbid: u32, on: bool) -> Result<()> {
        self.live()?;
        check_domain(domain)?;
        let max = domain_max_cbid(domain).unwrap_or(0);
        if cbid == 0 || cbid > max {
            return Err(Error::InvalidArgument(format!(
                "callback id {cbid} is out of range for domain {domain}; valid ids are 1-{max}"
            )));
        }
        if self.running {
            // Before MSPTI sees the toggle: a call open across it is discarded.
            windows::toggled(domain, Some(cbid));
            self.call_enable_callback(on, domain, cbid)?;
        }
        let w = &mut self.wanted[domain as usize];
        *w = if on { *w | (1 << cbid) } else { *w & !(1 << cbid) };
        self.tell_activity()
    }

    /// Tell the collector whether launches are traced (its join needs their spans).
    fn tell_activity(&self) -> Result<()> {
        let Some(a) = &self.activity else { return Ok(()) };
        let launches =
            crate::activity::launch_hooks::traces_launches(self.wanted[MSPTI_CB_DOMAIN_RUNTIME as usize]);
        lock(a).set_launch_callbacks(launches)
    }

    fn apply_wanted(&self) -> Result<()> {
        for (_, domain) in DOMAINS {
            let w = self.wanted[domain as usize];
            if w == domain_bits(domain) {
                self.call_enable_domain(true, domain)?;
            } else {
                for cbid in 1..64 {
                    if w & (1 << cbid) != 0 {
                        self.call_enable_callback(true, domain, cbid)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Disable everything in the library: per domain, and if that call fails, id by id, so a
    /// failing enable-domain cannot leave callbacks on. Returns the first error.
    fn disable_all(&self) -> Result<()> {
        let mut first = Ok(());
        for (_, domain) in DOMAINS {
            if let Err(e) = self.call_enable_domain(false, domain) {
                for cbid in 1..64 {
                    if self.wanted[domain as usize] & (1 << cbid) != 0 {
                        let _ = self.call_enable_callback(false, domain, cbid);
                    }
                }
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    /// Begin recording with `clock` (falls back to monotonic where unavailable); returns the
    /// clock in use.
    ///
    /// # Errors
    /// A closed session, a poisoned callback, or the library's error from an enable call (then
    /// nothing stays enabled).
    pub fn start(&mut self, clock: ClockKind) -> Result<ClockKind> {
        self.live()?;
        if windows::POISONED.load(Ordering::Relaxed) {
            return Err(Error::Poisoned);
        }
        if self.running {
            return Ok(self.clock);
        }
        self.clock = clock::select(clock, self.lib.get_timestamp);
        arrivals::discard(); // the rings' arrivals of earlier runs are of windows already closed
        windows::begin_run(self.slowest);
        if let Err(e) = self.apply_wanted() {
            windows::end_run();
            let _ = self.disable_all();
            return Err(e);
        }
        self.running = true;
        if let Some(a) = &self.activity {
            lock(a).start(self.clock)?;
        }
        Ok(self.clock)
    }

    /// Share this subscription with an activity collector (started at once if running).
    ///
    /// # Errors
    /// A closed session, or the library's error enabling a kind.
    pub fn attach_activity(&mut self, a: Arc<Mutex<Collector>>) -> Result<()> {
        self.live()?;
        self.activity = Some(a.clone());
        self.tell_activity()?;
        if self.running {
            lock(&a).start(self.clock)?;
        }
        Ok(())
    }

    /// Stop recording and disable every callback in the library (no cost while stopped).
    ///
    /// # Errors
    /// The library's error from disabling; recording stops regardless.
    pub fn stop(&mut self) -> Result<()> {
        if !self.running {
            return Ok(());
        }
        self.running = false;
        // The callbacks go first, then the run ends: a call whose EXIT MSPTI delivered before the
        // disable returned is counted (its callback read a recording run word), so a stop loses
        // no call that completed while on; only calls still open at the stop are left, in flight.
        let disabled = self.disable_all();
        windows::end_run();
        // A callback that read the recording run just before may not have written yet: the last
        // window is taken after it has (quiescence.rs), or it is counted as unsettled.
        sections::settle_all(SETTLE_BOUND);
        if let Some(a) = &self.activity {
            // Drained after the callbacks, so no record of this run is left in a buffer.
            lock(a).stop();
        }
        disabled
    }

    /// Stop, unsubscribe, and free the process's one session slot. Idempotent. If
    /// `msptiUnsubscribe` fails the session stays open (it still holds MSPTI's slot), so the
    /// caller can retry.
    ///
    /// # Errors
    /// The library's error from `msptiUnsubscribe` (or from disabling).
    pub fn close(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        let stopped = self.stop();
        if let Some(a) = &self.activity {
            lock(a).close();
        }
        if !windows::FORKED.load(Ordering::Relaxed) {
            // SAFETY: our handle; the callback stays valid after this returns (static state only).
            let rc = unsafe { (self.lib.unsubscribe)(self.handle) };
            self.lib.check("msptiUnsubscribe", rc)?;
        }
        self.closed = true;
        ACTIVE.store(false, Ordering::Release);
        // Its arrivals go with it: whoever wanted them (the window writer) took them before the
        // close, and a later writer must not take them as its own.
        arrivals::discard();
        stopped
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.close();
    }
}
