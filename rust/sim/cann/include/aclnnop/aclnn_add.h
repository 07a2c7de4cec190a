/* aclnnAdd (aclnnop/aclnn_add.h, libopapi.so): out = self + alpha * other, with the signatures of
 * Huawei's public CANN operator reference. Part of mspti-lens's simulated CANN tree
 * (docs/simulated_cann.md). */
#ifndef SIM_ACLNN_ADD_H_
#define SIM_ACLNN_ADD_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnAddGetWorkspaceSize(const aclTensor *self, const aclTensor *other,
                                                         const aclScalar *alpha, aclTensor *out,
                                                         uint64_t *workspaceSize, aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnAdd(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                         aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
