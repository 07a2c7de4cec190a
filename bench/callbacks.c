/* Comparison callbacks for bench/run.py, compiled at run time with gcc into a temporary
 * directory (never committed as a binary). Each is an MSPTI subscriber callback with the real
 * C signature; bench/run.py subscribes one at a time to the simulator (a stand-in libmspti.so).
 *
 *   bench_empty_cb     dispatch only: the floor of any subscriber.
 *   bench_minimal_cb   the limit: rdtsc at ENTER and EXIT, a thread-local stack push/pop, and one
 *                      increment of a thread-local log-linear histogram bucket (2^7 sub-buckets
 *                      per power of two, like mspti-lens). No key lookup, no counters, no reset.
 *   bench_minimal_cgt_cb  the same with clock_gettime(CLOCK_MONOTONIC) instead of rdtsc.
 *   bench_trace_cb     the trace approach (nsys/HTA style): pair ENTER/EXIT on a thread-local
 *                      stack and append every (start, end, name) record to per-thread chunks in
 *                      native memory; aggregation happens afterwards (in polars, by run.py).
 *
 * Only callbackSite (offset 0) and functionName (offset 8) are read, as a real MSPTI fills
 * nothing else.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* "The TSC": the cheapest cycle/tick counter of the machine. */
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
static inline uint64_t ticks(void) { return __rdtsc(); }
#elif defined(__aarch64__)
static inline uint64_t ticks(void) {
    uint64_t v;
    __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
    return v;
}
#else
static inline uint64_t ticks(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
#endif

typedef struct {
    uint32_t callbackSite;
    const char *functionName;
    /* the other fields (functionParams ... correlationData) are never read */
} cbdata_t;

enum { SITE_ENTER = 0, SITE_EXIT = 1 };
#define DEPTH 64
#define BUCKETS 4096

static inline unsigned bucket_of(uint64_t v) {
    if (v >= (1ull << 37)) return BUCKETS - 1;
    unsigned msb = 63 - __builtin_clzll(v | 1);
    unsigned e = msb > 7 ? msb - 7 : 0;
    return (e << 7) + (unsigned)(v >> e);
}

/* ---- empty -------------------------------------------------------------------------------- */
void bench_empty_cb(void *ud, uint32_t domain, uint32_t cbid, const cbdata_t *d) {
    (void)ud; (void)domain; (void)cbid; (void)d;
}

/* ---- minimal (TSC) ------------------------------------------------------------------------ */
static __thread uint64_t min_stack[DEPTH];
static __thread unsigned min_depth;
static __thread uint64_t min_hist[BUCKETS];

void bench_minimal_cb(void *ud, uint32_t domain, uint32_t cbid, const cbdata_t *d) {
    (void)ud; (void)domain; (void)cbid;
    if (d->callbackSite == SITE_ENTER) {
        unsigned n = min_depth;
        if (n < DEPTH) { min_stack[n] = ticks(); min_depth = n + 1; }
    } else {
        uint64_t t = ticks();
        unsigned n = min_depth;
        if (n) { min_depth = n - 1; min_hist[bucket_of(t - min_stack[n - 1])]++; }
    }
}

/* ---- minimal (clock_gettime) -------------------------------------------------------------- */
static __thread uint64_t cgt_stack[DEPTH];
static __thread unsigned cgt_depth;
static __thread uint64_t cgt_hist[BUCKETS];

static inline uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void bench_minimal_cgt_cb(void *ud, uint32_t domain, uint32_t cbid, const cbdata_t *d) {
    (void)ud; (void)domain; (void)cbid;
    if (d->callbackSite == SITE_ENTER) {
        unsigned n = cgt_depth;
        if (n < DEPTH) { cgt_stack[n] = mono_ns(); cgt_depth = n + 1; }
    } else {
        uint64_t t = mono_ns();
        unsigned n = cgt_depth;
        if (n) { cgt_depth = n - 1; cgt_hist[bucket_of(t - cgt_stack[n - 1])]++; }
    }
}

/* The minimal callback's counts, summed over the calling thread only (a sanity check). */
uint64_t bench_minimal_count(void) {
    uint64_t s = 0;
    for (int i = 0; i < BUCKETS; i++) s += min_hist[i];
    return s;
}

/* ---- trace -------------------------------------------------------------------------------- */
typedef struct { uint64_t start, end; uint64_t name; } rec_t; /* 24 bytes per call */
#define CHUNK_RECS 65536
typedef struct chunk { struct chunk *next; uint64_t n; rec_t r[CHUNK_RECS]; } chunk_t;

static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static chunk_t *trace_chunks; /* every chunk of every thread, newest first */
static uint64_t trace_generation;
static __thread chunk_t *tr_cur;
static __thread uint64_t tr_gen;
static __thread uint64_t tr_stack[DEPTH];
static __thread unsigned tr_depth;
static uint64_t trace_dropped;

static chunk_t *trace_new_chunk(void) {
    chunk_t *c = malloc(sizeof(chunk_t));
    if (!c) return NULL;
    c->n = 0;
    pthread_mutex_lock(&trace_lock);
    c->next = trace_chunks;
    trace_chunks = c;
    tr_gen = trace_generation;
    pthread_mutex_unlock(&trace_lock);
    return c;
}

void bench_trace_cb(void *ud, uint32_t domain, uint32_t cbid, const cbdata_t *d) {
    (void)ud; (void)domain; (void)cbid;
    if (d->callbackSite == SITE_ENTER) {
        unsigned n = tr_depth;
        if (n < DEPTH) { tr_stack[n] = ticks(); tr_depth = n + 1; }
    } else {
        uint64_t t = ticks();
        unsigned n = tr_depth;
        if (!n) return;
        tr_depth = n - 1;
        chunk_t *c = tr_cur;
        if (!c || tr_gen != __atomic_load_n(&trace_generation, __ATOMIC_RELAXED) || c->n == CHUNK_RECS) {
            c = tr_cur = trace_new_chunk();
            if (!c) { __atomic_fetch_add(&trace_dropped, 1, __ATOMIC_RELAXED); return; }
        }
        rec_t *r = &c->r[c->n];
        r->start = tr_stack[n - 1];
        r->end = t;
        r->name = (uint64_t)(uintptr_t)d->functionName;
        c->n++;
    }
}

/* Records held (call with no callback running). */
uint64_t bench_trace_count(void) {
    uint64_t s = 0;
    pthread_mutex_lock(&trace_lock);
    for (chunk_t *c = trace_chunks; c; c = c->next) s += c->n;
    pthread_mutex_unlock(&trace_lock);
    return s;
}

/* Copy every record into three columns of at least bench_trace_count() entries; returns the
 * number copied. Durations are left in TSC ticks (run.py converts with the measured rate). */
uint64_t bench_trace_export(uint64_t *start, uint64_t *end, uint64_t *name) {
    uint64_t k = 0;
    pthread_mutex_lock(&trace_lock);
    for (chunk_t *c = trace_chunks; c; c = c->next) {
        for (uint64_t i = 0; i < c->n; i++, k++) {
            start[k] = c->r[i].start;
            end[k] = c->r[i].end;
            name[k] = c->r[i].name;
        }
    }
    pthread_mutex_unlock(&trace_lock);
    return k;
}

/* Free every record; threads start new chunks on their next call. */
void bench_trace_clear(void) {
    pthread_mutex_lock(&trace_lock);
    chunk_t *c = trace_chunks;
    trace_chunks = NULL;
    __atomic_fetch_add(&trace_generation, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&trace_lock);
    while (c) { chunk_t *n = c->next; free(c); c = n; }
}

uint64_t bench_rdtsc(void) { return ticks(); }

/* ---- clock costs -------------------------------------------------------------------------- */
/* n reads of a clock in a loop; returns a checksum so the loop is kept. which: 0 the tick
 * counter, 1 clock_gettime(CLOCK_MONOTONIC), 2 the msptiGetTimestamp at `fn`. */
typedef uint32_t (*get_timestamp_fn)(uint64_t *);

uint64_t bench_clock_loop(int which, uint64_t n, void *fn) {
    uint64_t s = 0, t = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (which == 0) s += ticks();
        else if (which == 1) s += mono_ns();
        else { ((get_timestamp_fn)fn)(&t); s += t; }
    }
    return s;
}
