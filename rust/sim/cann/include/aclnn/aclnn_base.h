/* aclnn's base header (aclnn/aclnn_base.h): the executor of the two-phase aclnn calls, and the
 * tensor objects. Huawei's public CANN API reference. Part of mspti-lens's simulated CANN tree
 * (docs/simulated_cann.md). */
#ifndef SIM_ACLNN_BASE_H_
#define SIM_ACLNN_BASE_H_

#include "aclnn/acl_meta.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct aclOpExecutor aclOpExecutor;

#ifdef __cplusplus
}
#endif

#endif
