/* AscendCL's umbrella header (acl/acl.h): initialization and the runtime, as the simulated CANN
 * tree implements them (Huawei's public CANN API reference). Part of mspti-lens's simulated CANN
 * tree (docs/simulated_cann.md). */
#ifndef SIM_ACL_H_
#define SIM_ACL_H_

#include "acl_base.h"
#include "acl_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclError aclInit(const char *configPath);
ACL_FUNC_VISIBILITY aclError aclFinalize(void);

#ifdef __cplusplus
}
#endif

#endif
