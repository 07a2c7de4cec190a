/* The simulated device as the simulated runtime libraries drive it: functions of the tree's
 * libascend_hal.so, which is the simulator (rust/sim, libmspti.so) under a second name, so a
 * process has one device whether libmspti.so is preloaded or not (rust/sim/src/acl.rs). */
#ifndef SIM_HAL_H_
#define SIM_HAL_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The aclrtStream handle of stream id `stream` (never NULL). */
void *msimStreamHandle(uint32_t stream);
/* The device this thread's calls go to. */
void msimSetThreadDevice(uint32_t device);
/* What the next launch on this thread runs (the runtime's compact info for the profiler). */
void msimSetNextLaunch(const char *kernel, const char *node, uint64_t device_ns, uint32_t kernels);
/* Forget an announced launch no interception took. */
void msimClearNextLaunch(void);
/* Modelled host work of a runtime function, ns. */
void msimHostWork(uint64_t ns);
/* Block until this thread's device has finished `stream` (NULL: the thread's stream). */
void msimWaitStream(void *stream);

#ifdef __cplusplus
}
#endif

#endif
