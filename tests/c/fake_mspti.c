/* A tiny stand-in libmspti.so written in C, built by the tests with gcc.
 *
 * It behaves like the real MSPTI callback API where mspti-lens depends on it
 * (docs/reference.md: Callback data, One subscriber): it fills only callbackSite and functionName and puts an
 * invalid pointer (or random bits) in every other field, allows one subscriber (a second gets 2),
 * rejects cbid >= 64 and bad domains with 1, and exports none of the optional newer symbols.
 * fake_call() plays an intercepted API: ENTER, optional nested calls, EXIT, on the calling thread.
 */
#include <stdint.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <pthread.h>

typedef enum { DOMAIN_INVALID = 0, DOMAIN_RUNTIME = 1, DOMAIN_HCCL = 2 } msptiCallbackDomain;
typedef struct {
    uint32_t callbackSite;
    const char *functionName;
    const void *functionParams;
    const void *functionReturnValue;
    const char *symbolName;
    uint64_t correlationId;
    uint64_t reserved1;
    uint64_t reserved2;
    uint64_t *correlationData;
} msptiCallbackData;
typedef void (*msptiCallbackFunc)(void *, msptiCallbackDomain, uint32_t, const msptiCallbackData *);
struct msptiSubscriber_st { msptiCallbackFunc cb; void *ud; };
typedef struct msptiSubscriber_st *msptiSubscriberHandle;

static _Atomic(struct msptiSubscriber_st *) current;
static _Atomic uint64_t enabled[3];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint64_t delivered_exit;

int msptiSubscribe(msptiSubscriberHandle *out, msptiCallbackFunc cb, void *ud) {
    if (!out) return 1;
    pthread_mutex_lock(&lock);
    if (atomic_load(&current)) { pthread_mutex_unlock(&lock); return 2; }
    struct msptiSubscriber_st *s = malloc(sizeof *s);  /* never freed: late callbacks stay safe */
    s->cb = cb; s->ud = ud;
    for (int d = 0; d < 3; d++) atomic_store(&enabled[d], 0);
    atomic_store(&current, s);
    *out = s;
    pthread_mutex_unlock(&lock);
    return 0;
}

int msptiUnsubscribe(msptiSubscriberHandle h) {
    pthread_mutex_lock(&lock);
    struct msptiSubscriber_st *s = atomic_load(&current);
    int rc = 0;
    if (s && s != h) rc = 1;
    else if (s) { for (int d = 0; d < 3; d++) atomic_store(&enabled[d], 0); atomic_store(&current, NULL); }
    pthread_mutex_unlock(&lock);
    return rc;
}

static int check(msptiSubscriberHandle h, msptiCallbackDomain d) {
    struct msptiSubscriber_st *s = atomic_load(&current);
    if (!s) return -1;                     /* silent no-op without a subscriber (26.0/26.1) */
    if (s != h) return 1;
    if (d != DOMAIN_RUNTIME && d != DOMAIN_HCCL) return 1;
    return 0;
}

int msptiEnableCallback(uint32_t on, msptiSubscriberHandle h, msptiCallbackDomain d, uint32_t cbid) {
    int c = check(h, d);
    if (c < 0) return 0;
    if (c) return c;
    if (cbid >= 64) return 1;
    if (on) atomic_fetch_or(&enabled[d], 1ull << cbid); else atomic_fetch_and(&enabled[d], ~(1ull << cbid));
    return 0;
}

int msptiEnableDomain(uint32_t on, msptiSubscriberHandle h, msptiCallbackDomain d) {
    int c = check(h, d);
    if (c < 0) return 0;
    if (c) return c;
    uint64_t bits = (d == DOMAIN_RUNTIME ? ((1ull << 37) - 1) : ((1ull << 13) - 1)) & ~1ull;
    if (on) atomic_fetch_or(&enabled[d], bits); else atomic_fetch_and(&enabled[d], ~bits);
    return 0;
}

static void fire(uint32_t d, uint32_t cbid, uint32_t site, const char *name) {
    struct msptiSubscriber_st *s = atomic_load(&current);
    if (!s || !s->cb || d > 2 || cbid >= 64 || !(atomic_load(&enabled[d]) >> cbid & 1)) return;
    /* As the real library: a stack struct with only two fields written; the rest holds garbage. */
    msptiCallbackData data;
    uintptr_t bad = (uintptr_t)0xdeadbeefdead0000ull;
    data.callbackSite = site;
    data.functionName = name;
    data.functionParams = (const void *)bad;
    data.functionReturnValue = (const void *)(bad + 8);
    data.symbolName = (const char *)(bad + 16);
    data.correlationId = (uint64_t)rand();
    data.reserved1 = bad;
    data.reserved2 = bad;
    data.correlationData = (uint64_t *)(bad + 24);
    if (site == 1) atomic_fetch_add(&delivered_exit, 1);
    s->cb(s->ud, (msptiCallbackDomain)d, cbid, &data);
}

/* The intercepted functions: (domain, cbid, static name), like the real wrappers' __FUNCTION__. */
struct api { uint32_t d, cbid; const char *name; };
static const struct api APIS[] = {
    {1, 10, "aclrtLaunchKernel"}, {1, 10, "aclrtLaunchKernelV2"}, {1, 22, "aclrtMemcpy"},
    {1, 24, "aclrtMemcpyAsync"}, {1, 9, "aclrtSynchronizeStream"}, {1, 15, "aclrtMalloc"},
    {2, 1, "HcclAllReduce"}, {2, 3, "HcclAllGather"},
};
#define N_APIS (sizeof APIS / sizeof APIS[0])
uint32_t fake_api_count(void) { return N_APIS; }
const char *fake_api_name(uint32_t i) { return i < N_APIS ? APIS[i].name : 0; }

static volatile uint64_t sink;
static void work(uint32_t spins) { for (uint32_t i = 0; i < spins; i++) sink += i; }

/* Call API `api` with the APIs `inner[0..depth)` nested inside it, one in the other. */
void fake_call(uint32_t api, const uint32_t *inner, uint32_t depth, uint32_t spins) {
    if (api >= N_APIS) return;
    const struct api *a = &APIS[api];
    fire(a->d, a->cbid, 0, a->name);
    work(spins);
    if (depth > 0) fake_call(inner[0], inner + 1, depth - 1, spins);
    fire(a->d, a->cbid, 1, a->name);
}

/* `n` calls of `api` with the same nesting (throughput from one ctypes call). */
void fake_loop(uint32_t api, const uint32_t *inner, uint32_t depth, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) fake_call(api, inner, depth, 0);
}

/* A lone ENTER (0) or EXIT (1) of an API (unbalanced sequences). */
void fake_fire(uint32_t api, uint32_t site) {
    if (api < N_APIS) fire(APIS[api].d, APIS[api].cbid, site, APIS[api].name);
}

uint64_t fake_enabled(uint32_t d) { return d < 3 ? atomic_load(&enabled[d]) : 0; }
uint64_t fake_delivered_exits(void) { return atomic_load(&delivered_exit); }
