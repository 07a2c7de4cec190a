/* A stand-in libmspti.so with the Activity API, written in C and built by the tests with gcc.
 *
 * It behaves like MSPTI where mspti-lens's activity collector depends on it (the upstream
 * mspti_activity.h and csrc/activity/activity_manager.cpp; docs/reference.md):
 * - records are the packed layouts of mspti_activity.h, back to back; every byte a record does not
 *   fill (padding, the name/domain of device and END markers) holds garbage (0xA5, or a wild
 *   pointer), so a collector that reads an unfilled field reads garbage;
 * - buffers come from the user's request callback on the recording thread; a NULL buffer drops
 *   the record (counted; newest-dev msptiActivityGetNumDroppedRecords returns and resets it) and
 *   is later handed to complete as (NULL, 0, 0), as 26.0/26.1 do;
 * - a buffer >= 80 % full (or, after fa_set_handover(n), holding n bytes, as a short flush period
 *   hands buffers over) is handed over by a completion thread; FlushAll completes the queued
 *   and the current buffer synchronously, under the record lock (26.x);
 * - device records (KERNEL, device MARKER) come later from a "device" thread, in stream order
 *   (a launch returns before its kernel runs; kernels queue behind each other), at the earliest
 *   fa_set_device_delay(ms) after they were queued (records that trail their launch);
 * - correlation ids: bumped per thread before ENTER and per kernel launched; RUNTIME_API records
 *   carry the thread's current id; external correlation is one process-global stack, and a pop
 *   with a NULL out pointer fails without popping.
 * - timestamps are a virtual clock: every reading advances it by TICK ns (msptiGetTimestamp);
 *   with -DCANN8 (no msptiGetTimestamp) they are CLOCK_REALTIME ns.
 * Built with -DCANN8: no RUNTIME_API kind, no msptiGetTimestamp, no dropped-count API.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <pthread.h>
#include <unistd.h>
#include <sys/syscall.h>

#define TICK 1000ull

typedef struct {
    uint32_t callbackSite; const char *functionName; const void *functionParams;
    const void *functionReturnValue; const char *symbolName; uint64_t correlationId;
    uint64_t reserved1, reserved2; uint64_t *correlationData;
} msptiCallbackData;
typedef void (*msptiCallbackFunc)(void *, uint32_t, uint32_t, const msptiCallbackData *);
struct msptiSubscriber_st { msptiCallbackFunc cb; void *ud; };
typedef void (*ReqFn)(uint8_t **, size_t *, size_t *);
typedef void (*CplFn)(uint8_t *, size_t, size_t);

static _Atomic(struct msptiSubscriber_st *) current;
static _Atomic uint64_t enabled[3];
static _Atomic uint32_t kinds_on;  /* bit per kind */
static _Atomic uint64_t vclock = 1700000000000000000ull;
static _Atomic uint64_t corr_counter;
static _Atomic uint64_t mark_ids;
static _Atomic uint64_t emitted[16];
static _Atomic uint64_t dropped, dropped_total;
static pthread_mutex_t sub_lock = PTHREAD_MUTEX_INITIALIZER;

#ifdef CANN8
/* No msptiGetTimestamp to share a virtual clock: records carry CLOCK_REALTIME ns, as MSPTI's do. */
#include <time.h>
static uint64_t t(void) { struct timespec ts; clock_gettime(CLOCK_REALTIME, &ts); (void)vclock; return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec; }
#else
static uint64_t t(void) { return atomic_fetch_add(&vclock, TICK) + TICK; }
#endif
static uint32_t tid(void) { return (uint32_t)syscall(SYS_gettid); }
static __thread uint64_t my_corr;
#define WILD ((const char *)0xdeadbeefdead0000ull)

/* ---- callback API ---------------------------------------------------------------------------- */
int msptiSubscribe(struct msptiSubscriber_st **out, msptiCallbackFunc cb, void *ud) {
    if (!out) return 1;
    pthread_mutex_lock(&sub_lock);
    if (atomic_load(&current)) { pthread_mutex_unlock(&sub_lock); return 2; }
    struct msptiSubscriber_st *s = malloc(sizeof *s);
    s->cb = cb; s->ud = ud;
    atomic_store(&current, s);
    *out = s;
    pthread_mutex_unlock(&sub_lock);
    return 0;
}
int msptiUnsubscribe(struct msptiSubscriber_st *h) {
    pthread_mutex_lock(&sub_lock);
    if (atomic_load(&current) == h) { atomic_store(&current, NULL); enabled[1] = enabled[2] = 0; }
    pthread_mutex_unlock(&sub_lock);
    return 0;
}
int msptiEnableCallback(uint32_t on, struct msptiSubscriber_st *h, uint32_t d, uint32_t cbid) {
    if (h != atomic_load(&current) || d < 1 || d > 2 || cbid >= 64) return 1;
    if (on) atomic_fetch_or(&enabled[d], 1ull << cbid); else atomic_fetch_and(&enabled[d], ~(1ull << cbid));
    return 0;
}
int msptiEnableDomain(uint32_t on, struct msptiSubscriber_st *h, uint32_t d) {
    if (h != atomic_load(&current) || d < 1 || d > 2) return 1;
    uint64_t bits = (d == 1 ? ((1ull << 37) - 1) : ((1ull << 13) - 1)) & ~1ull;
    if (on) atomic_fetch_or(&enabled[d], bits); else atomic_fetch_and(&enabled[d], ~bits);
    return 0;
}
static void fire(uint32_t d, uint32_t cbid, uint32_t site, const char *name) {
    struct msptiSubscriber_st *s = atomic_load(&current);
    if (!s || !(atomic_load(&enabled[d]) >> cbid & 1)) return;
    msptiCallbackData data;
    memset(&data, 0xA5, sizeof data);  /* only the two fields below are real */
    data.callbackSite = site;
    data.functionName = name;
    s->cb(s->ud, d, cbid, &data);
}
#ifndef CANN8
int msptiGetTimestamp(uint64_t *ts) { if (!ts) return 1; *ts = t(); return 0; }
#endif

/* ---- buffers -------------------------------------------------------------------------------- */
static ReqFn req_fn; static CplFn cpl_fn;
static pthread_mutex_t buf_mtx = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *cur; static size_t cur_size, cur_off;
#define QMAX 4096
static struct { uint8_t *b; size_t size, valid; } fullq[QMAX];
static int fullq_n;
static int null_pending;
static _Atomic size_t handover;  /* 0: at 80 % full */
static pthread_cond_t full_cv = PTHREAD_COND_INITIALIZER;

int msptiActivityRegisterCallbacks(ReqFn r, CplFn c) { if (!r || !c) return 1; req_fn = r; cpl_fn = c; return 0; }

static int kind_valid(uint32_t k) {
#ifdef CANN8
    return k >= 1 && k <= 9;
#else
    return k >= 1 && k <= 12;
#endif
}
int msptiActivityEnable(uint32_t k) { if (!kind_valid(k)) return 1; atomic_fetch_or(&kinds_on, 1u << k); return 0; }
int msptiActivityDisable(uint32_t k) { if (!kind_valid(k)) return 1; atomic_fetch_and(&kinds_on, ~(1u << k)); return 0; }
static int on(uint32_t k) { return atomic_load(&kinds_on) >> k & 1; }

static void queue_full_locked(void) {
    if (cur && fullq_n < QMAX) { fullq[fullq_n].b = cur; fullq[fullq_n].size = cur_size; fullq[fullq_n].valid = cur_off; fullq_n++; }
    cur = NULL; cur_off = 0; cur_size = 0;
    pthread_cond_signal(&full_cv);
}

/* Append one record (kind's size) under the record lock, as ActivityManager::Record. */
static void record(const void *rec, size_t n) {
    pthread_mutex_lock(&buf_mtx);
    if (cur && cur_off + n > cur_size) queue_full_locked();
    if (!cur && req_fn) {
        size_t max = 0;
        req_fn(&cur, &cur_size, &max);
        if (!cur || cur_size < n) { if (!cur) null_pending++; cur = NULL; cur_size = 0; }
        cur_off = 0;
    }
    if (!cur) { atomic_fetch_add(&dropped, 1); atomic_fetch_add(&dropped_total, 1); pthread_mutex_unlock(&buf_mtx); return; }
    memcpy(cur + cur_off, rec, n);
    cur_off += n;
    atomic_fetch_add(&emitted[*(const uint32_t *)rec & 15], 1);
    size_t hand = atomic_load(&handover);
    if (hand ? cur_off >= hand : cur_off * 10 >= cur_size * 8) queue_full_locked();
    pthread_mutex_unlock(&buf_mtx);
}

static void *completer(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&buf_mtx);
        while (fullq_n == 0 && !null_pending) pthread_cond_wait(&full_cv, &buf_mtx);
        int nulls = null_pending; null_pending = 0;
        int n = fullq_n; typeof(fullq[0]) q[QMAX]; memcpy(q, fullq, sizeof q[0] * n); fullq_n = 0;
        pthread_mutex_unlock(&buf_mtx);
        for (int i = 0; i < nulls; i++) cpl_fn(NULL, 0, 0);
        for (int i = 0; i < n; i++) cpl_fn(q[i].b, q[i].size, q[i].valid);
    }
    return NULL;
}

int msptiActivityFlushAll(uint32_t flag) {
    (void)flag;
    pthread_mutex_lock(&buf_mtx);  /* 26.x: complete runs under the record lock */
    for (int i = 0; i < fullq_n; i++) cpl_fn(fullq[i].b, fullq[i].size, fullq[i].valid);
    fullq_n = 0;
    for (; null_pending > 0; null_pending--) cpl_fn(NULL, 0, 0);
    if (cur) { cpl_fn(cur, cur_size, cur_off); cur = NULL; cur_off = cur_size = 0; }
    pthread_mutex_unlock(&buf_mtx);
    return 0;
}
static _Atomic uint32_t period;
int msptiActivityFlushPeriod(uint32_t ms) { atomic_store(&period, ms); return 0; }
#ifndef CANN8
int msptiActivityGetNumDroppedRecords(void *ctx, uint32_t stream, size_t *n) {
    (void)ctx; (void)stream; if (!n) return 1; *n = atomic_exchange(&dropped, 0); return 0;
}
#endif

/* ---- external correlation: one global stack (as the real one, not per thread) --------------- */
static pthread_mutex_t ext_mtx = PTHREAD_MUTEX_INITIALIZER;
static uint64_t ext_stack[256]; static int ext_n;
int msptiActivityPushExternalCorrelationId(uint32_t kind, uint64_t id) {
    if (kind != 4 && kind != 2 && kind != 3) return 1;
    pthread_mutex_lock(&ext_mtx); if (ext_n < 256) ext_stack[ext_n++] = id; pthread_mutex_unlock(&ext_mtx);
    return 0;
}
int msptiActivityPopExternalCorrelationId(uint32_t kind, uint64_t *last) {
    if (!last) return 1;  /* the real one: NULL fails and pops nothing */
    (void)kind;
    pthread_mutex_lock(&ext_mtx);
    int rc = 1; if (ext_n > 0) { *last = ext_stack[--ext_n]; rc = 0; }
    pthread_mutex_unlock(&ext_mtx);
    return rc;
}

/* ---- records ---------------------------------------------------------------------------------- */
#define PACKED __attribute__((packed, aligned(8)))
typedef struct PACKED { uint32_t kind, flag, sourceKind; uint64_t timestamp, id; uint32_t a, b; const char *name, *domain; } Marker;
typedef struct PACKED { uint32_t kind; uint64_t start, end; uint32_t dev, stream; uint64_t corr; const char *type, *name; } Kernel;
typedef struct PACKED { uint32_t kind; uint64_t start, end; uint32_t pid, tid; uint64_t corr; const char *name; } Api;
typedef struct PACKED { uint32_t kind; uint64_t start, end; uint32_t dev, stream; double bw; const char *name, *comm; } Hccl;
typedef struct PACKED { uint32_t kind, copyKind; uint64_t bytes, start, end; uint32_t dev, stream; uint64_t corr; uint8_t isAsync; } Memcpy;
typedef struct PACKED { uint32_t kind, extKind; uint64_t extId, corr; } ExtCorr;
typedef struct PACKED { uint32_t kind, dataType; uint64_t count; uint32_t dev, stream; uint64_t start, end; const char *alg, *name, *comm; uint64_t corr; } Comm;
_Static_assert(sizeof(Marker) == 56 && sizeof(Kernel) == 56 && sizeof(Api) == 48 && sizeof(Hccl) == 56, "layout");
_Static_assert(sizeof(Memcpy) == 56 && sizeof(ExtCorr) == 24 && sizeof(Comm) == 72, "layout");
#define GARBAGE(r) memset(&(r), 0xA5, sizeof (r))

static void bump(void) {
    my_corr = atomic_fetch_add(&corr_counter, 1) + 1;
    if (!on(8)) return;
    pthread_mutex_lock(&ext_mtx);
    for (int i = ext_n - 1; i >= 0 && i >= ext_n - 1; i--) {  /* the top id of the pushed kind */
        ExtCorr e; GARBAGE(e); e.kind = 8; e.extKind = 4; e.extId = ext_stack[i]; e.corr = my_corr;
        pthread_mutex_unlock(&ext_mtx); record(&e, sizeof e); pthread_mutex_lock(&ext_mtx);
    }
    pthread_mutex_unlock(&ext_mtx);
}

/* ---- the device: per-stream timelines, records delivered later by the device thread --------- */
#define STREAMS 16
static uint64_t stream_free[STREAMS];
#define DMAX 65536
static struct { int is_kernel; Kernel k; Marker m; uint64_t due; } devq[DMAX];
static int devq_n;
static pthread_mutex_t dev_mtx = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int device_paused;
/* Set (under dev_mtx) while the device thread delivers what it took from the queue. */
static _Atomic int delivering;
static _Atomic uint64_t device_delay_ns;
#include <time.h>
static uint64_t mono_ns(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec; }

static void *device(void *arg) {
    (void)arg;
    for (;;) {
        usleep(1000);
        if (atomic_load(&device_paused)) continue;
        pthread_mutex_lock(&dev_mtx);
        uint64_t now = mono_ns();
        int n = 0;
        while (n < devq_n && devq[n].due <= now) n++;  /* queued in order: the due ones lead */
        static typeof(devq[0]) q[DMAX]; memcpy(q, devq, sizeof q[0] * n);
        memmove(devq, devq + n, sizeof devq[0] * (devq_n - n)); devq_n -= n;
        if (n) atomic_store(&delivering, 1);
        pthread_mutex_unlock(&dev_mtx);
        for (int i = 0; i < n; i++) {
            if (q[i].is_kernel) { if (on(2)) record(&q[i].k, sizeof q[i].k); }
            else if (on(1)) record(&q[i].m, sizeof q[i].m);
        }
        atomic_store(&delivering, 0);
    }
    return NULL;
}
/* 1 when every queued device record has been delivered (the tests wait for it: the device
 * thread, like a real one, delivers later, and a loaded machine may starve it for a while). */
int fa_device_idle(void) {
    pthread_mutex_lock(&dev_mtx);
    int idle = devq_n == 0 && !atomic_load(&delivering);
    pthread_mutex_unlock(&dev_mtx);
    return idle;
}
/* Reserve device time on a stream: after what is queued there, not before `ready`. */
static uint64_t schedule(uint32_t stream, uint64_t ready, uint64_t dur) {
    uint64_t s = stream_free[stream % STREAMS];
    if (s < ready) s = ready;
    stream_free[stream % STREAMS] = s + dur;
    return s;
}
static void device_kernel(uint32_t stream, const char *name, uint64_t start, uint64_t dur, uint64_t corr) {
    Kernel k; GARBAGE(k);
    k.kind = 2; k.start = start; k.end = start + dur; k.dev = 0; k.stream = stream; k.corr = corr;
    k.type = "KERNEL_AICORE"; k.name = name;
    if (devq_n < DMAX) { devq[devq_n].is_kernel = 1; devq[devq_n].k = k; devq[devq_n].due = mono_ns() + atomic_load(&device_delay_ns); devq_n++; }
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void start_threads(void) {
    pthread_t a, b;
    pthread_create(&a, NULL, completer, NULL); pthread_detach(a);
    pthread_create(&b, NULL, device, NULL); pthread_detach(b);
}
__attribute__((constructor)) static void init(void) { pthread_once(&once, start_threads); }

/* ---- the intercepted runtime ---------------------------------------------------------------- */
static const char *LAUNCH_NAMES[] = {"aclrtLaunchKernel", "aclrtLaunchKernelV2", "aclrtLaunchKernelWithConfig"};
static __thread struct { uint32_t stream; const char *name; uint64_t dur, corr; } last_kernel;

/* One launch: correlation bump, ENTER, the runtime's API record, `kernels` task-track bumps and
 * kernels queued on `stream` (ready `queue_ns` after the launch), EXIT. */
void fa_launch(uint32_t api, uint32_t stream, const char *kernel, uint32_t kernels, uint64_t kernel_ns, uint64_t queue_ns) {
    const char *fname = LAUNCH_NAMES[api % 3];
    bump();
    fire(1, 10, 0, fname);
    uint64_t a0 = t();
    for (uint32_t i = 0; i < kernels; i++) {
        bump();
        pthread_mutex_lock(&dev_mtx);
        uint64_t s = schedule(stream, a0 + queue_ns, kernel_ns);
        device_kernel(stream, kernel, s, kernel_ns, my_corr);
        pthread_mutex_unlock(&dev_mtx);
        last_kernel.stream = stream; last_kernel.name = kernel; last_kernel.dur = kernel_ns; last_kernel.corr = my_corr;
    }
    uint64_t a1 = t();
    (void)a1;
#ifndef CANN8
    if (on(12)) { Api r; GARBAGE(r); r.kind = 12; r.start = a0; r.end = a1; r.pid = getpid(); r.tid = tid(); r.corr = my_corr; r.name = "LaunchKernelV2"; record(&r, sizeof r); }
#endif
    fire(1, 10, 1, fname);
}

/* Graph replay: the thread's last kernel runs `times` more times with its original correlation id. */
void fa_replay(uint32_t times) {
    pthread_mutex_lock(&dev_mtx);
    for (uint32_t i = 0; i < times; i++) {
        uint64_t s = schedule(last_kernel.stream, 0, last_kernel.dur);
        device_kernel(last_kernel.stream, last_kernel.name, s, last_kernel.dur, last_kernel.corr);
    }
    pthread_mutex_unlock(&dev_mtx);
}

/* A non-launch runtime API with its own RUNTIME_API record (never a launch's). */
void fa_memcpy(uint64_t bytes, uint32_t copy_kind) {
    bump();
    fire(1, 22, 0, "aclrtMemcpy");
    uint64_t a0 = t(), a1 = t();
#ifndef CANN8
    if (on(12)) { Api r; GARBAGE(r); r.kind = 12; r.start = a0; r.end = a1; r.pid = getpid(); r.tid = tid(); r.corr = my_corr; r.name = "MemCopySync"; record(&r, sizeof r); }
#endif
    if (on(7)) { Memcpy m; GARBAGE(m); m.kind = 7; m.copyKind = copy_kind; m.bytes = bytes; m.start = a0; m.end = a1; m.dev = 0; m.stream = 0; m.corr = my_corr; m.isAsync = 0; record(&m, sizeof m); }
    fire(1, 22, 1, "aclrtMemcpy");
}

void fa_hccl(const char *op, const char *comm, uint64_t dur, double bw) {
    if (!on(4)) return;
    Hccl h; GARBAGE(h); uint64_t s = t();
    h.kind = 4; h.start = s; h.end = s + dur; h.dev = 0; h.stream = 9; h.bw = bw; h.name = op; h.comm = comm;
    record(&h, sizeof h);
}
void fa_communication(const char *op, const char *comm, uint32_t dtype, uint64_t count, uint64_t dur) {
    if (!on(9)) return;
    Comm c; GARBAGE(c); uint64_t s = t();
    c.kind = 9; c.dataType = dtype; c.count = count; c.dev = 0; c.stream = 9; c.start = s; c.end = s + dur;
    c.alg = "RING"; c.name = op; c.comm = comm; c.corr = 0;
    record(&c, sizeof c);
}

/* A record of an unknown kind (size unknown to any consumer): 40 bytes of kind 77. */
void fa_bad_record(uint32_t kind) {
    uint8_t r[40]; memset(r, 0xA5, sizeof r); memcpy(r, &kind, 4); record(r, sizeof r);
}
void fa_null_complete(void) { cpl_fn(NULL, 0, 0); }
void fa_pause_device(int p) { atomic_store(&device_paused, p); }
/* Device records come no sooner than `ms` after they were queued (0: at the next 1 ms tick). */
void fa_set_device_delay(uint32_t ms) { atomic_store(&device_delay_ns, (uint64_t)ms * 1000000ull); }
/* Hand a buffer over once it holds `bytes` (0: at 80 % full, the default). */
void fa_set_handover(size_t bytes) { atomic_store(&handover, bytes); }
uint64_t fa_emitted(uint32_t kind) { return atomic_load(&emitted[kind & 15]); }
uint64_t fa_dropped_total(void) { return atomic_load(&dropped_total); }
uint64_t fa_now(void) { return atomic_load(&vclock); }
void fa_reset_counts(void) { for (int i = 0; i < 16; i++) atomic_store(&emitted[i], 0); atomic_store(&dropped_total, 0); }

/* ---- MSTX (the stand-in exports it too, like the simulator) -------------------------------- */
struct dom { const char *name; };
/* MSPTI copies each message into a hash-keyed cache, so a record's name stays valid (§2.1). */
#define CACHE 4096
static const char *msg_cache[CACHE];
static pthread_mutex_t cache_mtx = PTHREAD_MUTEX_INITIALIZER;
static const char *cache_msg(const char *m) {
    uint64_t h = 1469598103934665603ull;
    for (const char *c = m; *c; c++) h = (h ^ (uint8_t)*c) * 1099511628211ull;
    pthread_mutex_lock(&cache_mtx);
    for (uint64_t i = 0; i < CACHE; i++) {
        const char **slot = &msg_cache[(h + i) % CACHE];
        if (!*slot) *slot = strdup(m);
        if (strcmp(*slot, m) == 0) { pthread_mutex_unlock(&cache_mtx); return *slot; }
    }
    pthread_mutex_unlock(&cache_mtx);
    return "";
}
static void marker(uint32_t flag, uint64_t id, const char *msg, const char *domain, void *stream) {
    if (!on(1)) return;
    Marker m; GARBAGE(m);
    int start_or_mark = flag == 1 || flag == 2 || flag == 8 || flag == 16;
    m.kind = 1; m.flag = flag; m.sourceKind = 0; m.timestamp = t(); m.id = id; m.a = getpid(); m.b = tid();
    m.name = start_or_mark ? cache_msg(msg) : ""; m.domain = start_or_mark ? domain : "";
    record(&m, sizeof m);
    if (stream) {
        uint32_t s = (uint32_t)(uintptr_t)stream;
        Marker d; GARBAGE(d);
        pthread_mutex_lock(&dev_mtx);
        d.kind = 1; d.flag = flag; d.sourceKind = 1; d.timestamp = schedule(s, m.timestamp, 0); d.id = id;
        d.a = 0; d.b = s; d.name = WILD; d.domain = WILD;  /* never filled on device */
        if (devq_n < DMAX) { devq[devq_n].is_kernel = 0; devq[devq_n].m = d; devq[devq_n].due = mono_ns() + atomic_load(&device_delay_ns); devq_n++; }
        pthread_mutex_unlock(&dev_mtx);
    }
}
static _Atomic(void *) range_streams[4096];
void mstxMarkA(const char *msg, void *stream) { marker(stream ? 8 : 1, atomic_fetch_add(&mark_ids, 1) + 1, msg, "default", stream); }
uint64_t mstxRangeStartA(const char *msg, void *stream) {
    if (!on(1)) return 0;
    uint64_t id = atomic_fetch_add(&mark_ids, 1) + 1;
    atomic_store(&range_streams[id % 4096], stream);
    marker(stream ? 16 : 2, id, msg, "default", stream);
    return id;
}
void mstxRangeEnd(uint64_t id) { if (id) { void *s = atomic_load(&range_streams[id % 4096]); marker(s ? 32 : 4, id, "", "", s); } }
void *mstxDomainCreateA(const char *name) { struct dom *d = malloc(sizeof *d); d->name = strdup(name); return d; }
void mstxDomainDestroy(void *d) { (void)d; }
void mstxDomainMarkA(void *d, const char *msg, void *stream) { marker(stream ? 8 : 1, atomic_fetch_add(&mark_ids, 1) + 1, msg, ((struct dom *)d)->name, stream); }
uint64_t mstxDomainRangeStartA(void *d, const char *msg, void *stream) {
    if (!on(1)) return 0;
    uint64_t id = atomic_fetch_add(&mark_ids, 1) + 1;
    atomic_store(&range_streams[id % 4096], stream);
    marker(stream ? 16 : 2, id, msg, ((struct dom *)d)->name, stream);
    return id;
}
void mstxDomainRangeEnd(void *d, uint64_t id) { (void)d; mstxRangeEnd(id); }
