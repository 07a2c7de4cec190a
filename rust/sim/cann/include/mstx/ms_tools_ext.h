/* MSTX, the MindStudio Tools Extension (mstx/ms_tools_ext.h, libms_tools_ext.so): marks and
 * ranges a profiler (MSPTI) records, with the signatures of Huawei's public mstx API reference.
 * Part of mspti-lens's simulated CANN tree (docs/simulated_cann.md). */
#ifndef SIM_MS_TOOLS_EXT_H_
#define SIM_MS_TOOLS_EXT_H_

#include <stdint.h>
#include "acl/acl_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef uint64_t mstxRangeId;
typedef struct mstxDomainRegistration_st mstxDomainRegistration_t;
typedef mstxDomainRegistration_t *mstxDomainHandle_t;

void mstxMarkA(const char *message, aclrtStream stream);
mstxRangeId mstxRangeStartA(const char *message, aclrtStream stream);
void mstxRangeEnd(mstxRangeId id);
mstxDomainHandle_t mstxDomainCreateA(const char *name);
void mstxDomainDestroy(mstxDomainHandle_t domain);
void mstxDomainMarkA(mstxDomainHandle_t domain, const char *message, aclrtStream stream);
mstxRangeId mstxDomainRangeStartA(mstxDomainHandle_t domain, const char *message, aclrtStream stream);
void mstxDomainRangeEnd(mstxDomainHandle_t domain, mstxRangeId id);

#ifdef __cplusplus
}
#endif

#endif
