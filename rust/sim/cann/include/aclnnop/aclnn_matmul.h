/* aclnnMatmul (aclnnop/aclnn_matmul.h, libopapi.so): out = self @ mat2 for 2-D tensors, with the
 * signatures of Huawei's public CANN operator reference. Part of mspti-lens's simulated CANN tree
 * (docs/simulated_cann.md). */
#ifndef SIM_ACLNN_MATMUL_H_
#define SIM_ACLNN_MATMUL_H_

#include "aclnn/aclnn_base.h"

#ifdef __cplusplus
extern "C" {
#endif

ACL_FUNC_VISIBILITY aclnnStatus aclnnMatmulGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2,
                                                            aclTensor *out, int8_t cubeMathType,
                                                            uint64_t *workspaceSize, aclOpExecutor **executor);
ACL_FUNC_VISIBILITY aclnnStatus aclnnMatmul(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                            aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
