/* The simulated device as the simulated runtime libraries drive it: functions of the tree's
 * libascend_hal.so, which is the simulator (rust/sim, libmspti.so) under a second name, so a
 * process has one device whether libmspti.so is preloaded or not (rust/sim/src/model/interpose.rs). */
#ifndef SIM_HAL_H_
#define SIM_HAL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The aclrtStream handle of stream id `stream` (never NULL). */
void *msimStreamHandle(uint32_t stream);
/* The handle of a new stream: the next stream id of the device (1, 2, ...), or the one the
 * simulator's own workloads announced for this thread's next stream. */
void *msimCreateStream(void);
/* The device this thread's calls go to. */
void msimSetThreadDevice(uint32_t device);
/* What the next launch on this thread runs (the runtime's compact info for the profiler). */
void msimSetNextLaunch(const char *kernel, const char *node, uint64_t device_ns, uint32_t kernels);
/* Forget an announced launch no interception took. */
void msimClearNextLaunch(void);
/* Modelled host work of a runtime function, ns; a host time the caller announced for this call
 * (the simulator's workloads do) takes its place. */
void msimHostWork(uint64_t ns);
/* Block until this thread's device has finished `stream` (NULL: the thread's stream). */
void msimWaitStream(void *stream);
/* Data work of an asynchronous call, queued on `stream` (NULL: the thread's stream) for the device
 * to do: it is done when the queue is run. The memory must stay valid until then. */
void msimQueueCopy(void *stream, void *dst, const void *src, size_t len);
void msimQueueFill(void *stream, void *dst, int32_t value, size_t len);
/* Do the data work queued on `stream` (NULL: on every stream of the thread's device), before the
 * host reads what it wrote or frees memory. */
void msimRunQueued(void *stream);
/* A synchronize: block until `stream` is done or the call's own host work `ns` (or the announced
 * one) has passed, whichever is later. */
void msimSyncWait(void *stream, uint64_t ns);

#ifdef __cplusplus
}
#endif

#endif
