/* The simulated libascendcl.so: AscendCL initialization and runtime (acl/acl.h). Memory is host
 * memory, streams are the simulated device's, and every call that does device work reaches the
 * simulated device through libascend_hal.so (sim_hal.h). With libmspti.so preloaded, the program's
 * calls of the intercepted functions reach MSPTI's wrappers first, which forward here. */
#include <malloc.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "acl/acl.h"
#include "sim_hal.h"

/* CANN's logging library (libascendalog.so), which the runtime links as CANN's does. */
int CheckLogLevelForC(int moduleId, int level);
void DlogInnerForC(int moduleId, int level, const char *fmt, ...);
#define LOG_MODULE_ASCENDCL 3
#define LOG_INFO 1

/* Modelled host time of the runtime's calls, ns: enough to be visible, small beside the device. */
#define HOST_NS_SMALL 2000
#define HOST_NS_ALLOC 5000
#define HOST_NS_LAUNCH 4000

/* An Atlas A2 device's HBM: what aclrtGetMemInfo reports as the total. */
#define DEVICE_HBM_BYTES (64ULL << 30)

static atomic_int g_initialized;
/* Device memory held by the program (aclrtMalloc, aclrtMallocCached), for aclrtGetMemInfo. */
static atomic_size_t g_device_bytes;
static _Thread_local int32_t t_device;
static _Thread_local aclrtContext t_context;

aclError aclInit(const char *configPath)
{
    (void)configPath;
    /* CANN allows aclInit after runtime calls (the samples set the device first); a second
     * aclInit is an error. */
    if (atomic_exchange(&g_initialized, 1)) {
        return ACL_ERROR_REPEAT_INITIALIZE;
    }
    if (CheckLogLevelForC(LOG_MODULE_ASCENDCL, LOG_INFO)) {
        DlogInnerForC(LOG_MODULE_ASCENDCL, LOG_INFO, "aclInit success (simulated CANN, no NPU)");
    }
    return ACL_SUCCESS;
}

aclError aclFinalize(void)
{
    atomic_store(&g_initialized, 0);
    return ACL_SUCCESS;
}

aclError aclrtSetDevice(int32_t deviceId)
{
    if (deviceId < 0) {
        return ACL_ERROR_INVALID_PARAM;
    }
    t_device = deviceId;
    msimSetThreadDevice((uint32_t)deviceId);
    msimHostWork(HOST_NS_SMALL);
    return ACL_SUCCESS;
}

aclError aclrtResetDevice(int32_t deviceId)
{
    if (deviceId < 0) {
        return ACL_ERROR_INVALID_PARAM;
    }
    msimRunQueued(NULL);
    msimWaitStream(NULL);
    msimHostWork(HOST_NS_SMALL);
    return ACL_SUCCESS;
}

aclError aclrtGetDevice(int32_t *deviceId)
{
    if (deviceId == NULL) {
        return ACL_ERROR_INVALID_PARAM;
    }
    *deviceId = t_device;
    return ACL_SUCCESS;
}

aclError aclrtGetDeviceCount(uint32_t *count)
{
    if (count == NULL) {
        return ACL_ERROR_INVALID_PARAM;
    }
    *count = 8;
    return ACL_SUCCESS;
}

struct SimContext {
    int32_t device;
};

aclError aclrtCreateContext(aclrtContext *context, int32_t deviceId)
{
    if (context == NULL || deviceId < 0) {
        return ACL_ERROR_INVALID_PARAM;
    }
    struct SimContext *c = malloc(sizeof *c);
    if (c == NULL) {
        return ACL_ERROR_BAD_ALLOC;
    }
    c->device = deviceId;
    *context = c;
    t_context = c;
    t_device = deviceId;
    msimSetThreadDevice((uint32_t)deviceId);
    msimHostWork(HOST_NS_SMALL);
    return ACL_SUCCESS;
}

aclError aclrtDestroyContext(aclrtContext context)
{
    if (context == NULL) {
        return ACL_ERROR_INVALID_PARAM;
    }
    if (t_context == context) {
        t_context = NULL;
    }
    free(context);
    msimHostWork(HOST_NS_SMALL);
    return ACL_SUCCESS;
}

aclError aclrtSetCurrentContext(aclrtContext context)
{
    if (context == NULL) {
        return ACL_ERROR_INVALID_PARAM;
    }
    t_context = context;
    t_device = ((struct SimContext *)context)->device;
    msimSetThreadDevice((uint32_t)t_device);
    return ACL_SUCCESS;
}

aclError aclrtGetCurrentContext(aclrtContext *context)
{
    if (context == NULL) {
        return ACL_ERROR_INVALID_PARAM;
    }
    *context = t_context;
    return ACL_SUCCESS;
}

aclError aclrtCreateStream(aclrtStream *stream)
{
    if (stream == NULL) {
        return ACL_ERROR_INVALID_PARAM;
    }
    *stream = msimCreateStream();
    msimHostWork(HOST_NS_SMALL);
    return ACL_SUCCESS;
}

aclError aclrtDestroyStream(aclrtStream stream)
{
    if (stream == NULL) {
        return ACL_ERROR_INVALID_PARAM;
    }
    msimRunQueued(stream);
    msimWaitStream(stream);
    msimHostWork(HOST_NS_SMALL);
    return ACL_SUCCESS;
}

aclError aclrtSynchronizeStream(aclrtStream stream)
{
    msimRunQueued(stream);
    msimSyncWait(stream, 0);
    return ACL_SUCCESS;
}

aclError aclrtSynchronizeDevice(void)
{
    msimRunQueued(NULL);
    msimWaitStream(NULL);
    return ACL_SUCCESS;
}

aclError aclrtStreamGetId(aclrtStream stream, int32_t *streamId)
{
    if (streamId == NULL) {
        return ACL_ERROR_INVALID_PARAM;
    }
    /* The inverse of msimStreamHandle: handle = id + 1; NULL is the default stream 0. */
    *streamId = stream == NULL ? 0 : (int32_t)((uintptr_t)stream - 1);
    return ACL_SUCCESS;
}

static aclError alloc(void **ptr, size_t size)
{
    if (ptr == NULL || size == 0) {
        return ACL_ERROR_INVALID_PARAM;
    }
    *ptr = calloc(1, size);
    msimHostWork(HOST_NS_ALLOC);
    return *ptr == NULL ? ACL_ERROR_BAD_ALLOC : ACL_SUCCESS;
}

static aclError device_alloc(void **devPtr, size_t size)
{
    aclError rc = alloc(devPtr, size);
    if (rc == ACL_SUCCESS) {
        atomic_fetch_add(&g_device_bytes, malloc_usable_size(*devPtr));
    }
    return rc;
}

aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy)
{
    (void)policy;
    return device_alloc(devPtr, size);
}

/* Device memory is host memory here, so a cached allocation is an ordinary one. */
aclError aclrtMallocCached(void **devPtr, size_t size, aclrtMemMallocPolicy policy)
{
    (void)policy;
    return device_alloc(devPtr, size);
}

aclError aclrtMallocHost(void **hostPtr, size_t size)
{
    return alloc(hostPtr, size);
}

/* Functions of this library never call its exported ones: with libmspti.so preloaded such a call
 * would bind to MSPTI's wrapper and be reported twice. They share static helpers instead. */
static aclError release(void *ptr)
{
    if (ptr == NULL) {
        return ACL_ERROR_INVALID_PARAM;
    }
    /* Freeing synchronizes with the device, as CANN's does: no queued copy outlives its memory. */
    msimRunQueued(NULL);
    free(ptr);
    msimHostWork(HOST_NS_SMALL);
    return ACL_SUCCESS;
}

aclError aclrtFree(void *devPtr)
{
    if (devPtr != NULL) {
        atomic_fetch_sub(&g_device_bytes, malloc_usable_size(devPtr));
    }
    return release(devPtr);
}

aclError aclrtFreeHost(void *hostPtr)
{
    return release(hostPtr);
}

/* The device's HBM as the program sees it: its total, less what the program holds. The simulated
 * device has no DDR of its own, so the DDR attributes report 0 and 0, as CANN does for memory a
 * device does not have. */
aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free, size_t *total)
{
    if (free == NULL || total == NULL || (int)attr < 0 || attr > ACL_HBM_MEM_P2P_NORMAL) {
        return ACL_ERROR_INVALID_PARAM;
    }
    int hbm = attr == ACL_HBM_MEM || attr == ACL_HBM_MEM_HUGE || attr == ACL_HBM_MEM_NORMAL ||
              attr == ACL_HBM_MEM_P2P_HUGE || attr == ACL_HBM_MEM_P2P_NORMAL;
    size_t held = atomic_load(&g_device_bytes);
    *total = hbm ? (size_t)DEVICE_HBM_BYTES : 0;
    *free = hbm ? (held < *total ? *total - held : 0) : 0;
    msimHostWork(HOST_NS_SMALL);
    return ACL_SUCCESS;
}

static aclError check_copy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind)
{
    if (dst == NULL || src == NULL || count > destMax || (int)kind < 0 || kind > ACL_MEMCPY_DEFAULT) {
        return ACL_ERROR_INVALID_PARAM;
    }
    return ACL_SUCCESS;
}

aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind)
{
    aclError rc = check_copy(dst, destMax, src, count, kind);
    if (rc != ACL_SUCCESS) {
        return rc;
    }
    memmove(dst, src, count);
    /* About 20 GB/s, plus a fixed cost. */
    msimHostWork(HOST_NS_SMALL + count / 20);
    return ACL_SUCCESS;
}

/* The device moves the data (its copy engine, while the host goes on): queued on the stream, done
 * when the host synchronizes with it (or frees memory). */
aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind,
                          aclrtStream stream)
{
    aclError rc = check_copy(dst, destMax, src, count, kind);
    if (rc != ACL_SUCCESS) {
        return rc;
    }
    msimQueueCopy(stream, dst, src, count);
    msimHostWork(HOST_NS_SMALL);
    return ACL_SUCCESS;
}

aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count)
{
    if (devPtr == NULL || count > maxCount) {
        return ACL_ERROR_INVALID_PARAM;
    }
    memset(devPtr, value, count);
    msimHostWork(HOST_NS_SMALL);
    return ACL_SUCCESS;
}

aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value, size_t count, aclrtStream stream)
{
    if (devPtr == NULL || count > maxCount) {
        return ACL_ERROR_INVALID_PARAM;
    }
    msimQueueFill(stream, devPtr, value, count);
    msimHostWork(HOST_NS_SMALL);
    return ACL_SUCCESS;
}

static aclError launch(void)
{
    /* The device work was announced (msimSetNextLaunch); MSPTI's wrapper, when preloaded, has
     * taken it. Without it nothing is recorded and the announcement is dropped. */
    msimClearNextLaunch();
    msimHostWork(HOST_NS_LAUNCH);
    return ACL_SUCCESS;
}

aclError aclrtLaunchKernel(aclrtFuncHandle funcHandle, uint32_t blockDim, const void *argsData, size_t argsSize,
                           aclrtStream stream)
{
    (void)funcHandle;
    (void)blockDim;
    (void)argsData;
    (void)argsSize;
    (void)stream;
    return launch();
}

aclError aclrtLaunchKernelV2(aclrtFuncHandle funcHandle, uint32_t blockDim, const void *argsData, size_t argsSize,
                             aclrtLaunchKernelCfg *cfg, aclrtStream stream)
{
    (void)funcHandle;
    (void)blockDim;
    (void)argsData;
    (void)argsSize;
    (void)cfg;
    (void)stream;
    return launch();
}

aclError aclrtLaunchKernelWithConfig(aclrtFuncHandle funcHandle, uint32_t blockDim, aclrtStream stream,
                                     aclrtLaunchKernelCfg *cfg, aclrtArgsHandle argsHandle, void *reserve)
{
    (void)funcHandle;
    (void)blockDim;
    (void)stream;
    (void)cfg;
    (void)argsHandle;
    (void)reserve;
    return launch();
}

aclError aclrtLaunchKernelWithHostArgs(aclrtFuncHandle funcHandle, uint32_t blockDim, aclrtStream stream,
                                       aclrtLaunchKernelCfg *cfg, void *hostArgs, size_t argsSize,
                                       aclrtPlaceHolderInfo *placeHolderArray, size_t placeHolderNum)
{
    (void)cfg;
    (void)placeHolderArray;
    (void)placeHolderNum;
    (void)funcHandle;
    (void)blockDim;
    (void)hostArgs;
    (void)argsSize;
    (void)stream;
    return launch();
}
