/* The work the scenarios profile: on one device and stream, per step an aclnnAdd and an
 * aclnnMatmul (each launches its kernel through the runtime), copies in and out, and the
 * collectives of a two-rank communicator. Everything it does is fixed, so two processes that run
 * it see the same calls and, on the simulator, the same kernels. */
#ifndef SCENARIO_WORK_H
#define SCENARIO_WORK_H

#include "acl/acl.h"

typedef struct ScenarioWork ScenarioWork;

/* Set device 0 up: a stream, device buffers, the operators' tensors, a communicator. NULL on error. */
ScenarioWork *scenario_open(void);
/* The stream the work runs on. */
aclrtStream scenario_stream(ScenarioWork *w);
/* Run `steps` steps; 0, or the number of the call that failed. */
int scenario_steps(ScenarioWork *w, int steps);
/* Free everything scenario_open made; 0 or an error. */
int scenario_close(ScenarioWork *w);

#endif
